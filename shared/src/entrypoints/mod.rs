//! How requests reach `App::handle`: from API Gateway through lambda_http, or from the local server.

pub mod dispatch;
pub mod lambda;
pub mod local;
