//! How events reach an endpoint's `Service` in a Lambda: API Gateway through lambda_http, and the
//! dispatch function's schedule and run-request events.

pub mod chat_stream;
pub mod dispatch;
pub mod http;

use crate::app::edge::Service;
use crate::app::ports::Served;
use crate::app::wiring::App;
use crate::platform::config::Vars;

pub type Error = lambda_http::Error;

/// A function's start-up, once per container: logging, then the endpoint's service from the
/// Lambda environment (a bad setting stops the start-up with a message naming the variable).
/// Only what `E`'s ports name is built and linked.
pub async fn start<E: Served>() -> Result<Service<E>, Error> {
    let vars = Vars::from_env();
    crate::platform::telemetry::init_lambda();
    let app = App::deployed(vars)
        .await
        .inspect_err(|e| tracing::error!(error = %e, "start-up failed"))?;
    Ok(app
        .service::<E>()
        .await
        .inspect_err(|e| tracing::error!(error = %e, "start-up failed"))?)
}
