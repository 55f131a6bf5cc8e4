//! How events reach an endpoint's `Service` in a Lambda: API Gateway through lambda_http, and the
//! dispatch function's schedule and run-request events.

pub mod chat_stream;
pub mod dispatch;
pub mod lambda;
