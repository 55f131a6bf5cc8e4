//! API Gateway HTTP API (payload v2) → the endpoint's `Service` → API Gateway, through
//! lambda_http.

use std::convert::Infallible;

use lambda_http::{Body, RequestExt};

use crate::api::Response;
use crate::config::Vars;
use crate::endpoints::Endpoint;
use crate::service::{Service, new_request_id};
use crate::wiring::App;

pub type Error = lambda_http::Error;

/// The whole of an HTTP Lambda's `main`: logging, the endpoint's service built once per
/// container (a bad setting stops the start-up with a message naming the variable), then the
/// runtime loop. Only what `E`'s ports name is built and linked.
pub async fn run<E: Endpoint>() -> Result<(), Error> {
    let vars = Vars::from_env();
    crate::telemetry::init_lambda();
    let service = App::deployed(vars)
        .await
        .inspect_err(|e| tracing::error!(error = %e, "start-up failed"))?
        .service::<E>()
        .await
        .inspect_err(|e| tracing::error!(error = %e, "start-up failed"))?;
    let service = &service;
    lambda_http::run(lambda_http::service_fn(
        move |event: lambda_http::Request| async move {
            Ok::<_, Infallible>(handle_event(service, event).await)
        },
    ))
    .await
}

/// One API Gateway event through the service.
pub async fn handle_event<E: Endpoint>(
    service: &Service<E>,
    event: lambda_http::Request,
) -> lambda_http::Response<Body> {
    let request_id = event
        .lambda_context_ref()
        .map(|c| c.request_id.clone())
        .filter(|id| !id.is_empty())
        .unwrap_or_else(new_request_id);
    to_lambda_response(service.handle(&request_id, event).await)
}

pub fn to_lambda_response(response: Response) -> lambda_http::Response<Body> {
    response.map(|bytes| {
        if bytes.is_empty() {
            Body::Empty
        } else {
            match String::from_utf8(bytes.to_vec()) {
                Ok(text) => Body::Text(text),
                Err(e) => Body::Binary(e.into_bytes()),
            }
        }
    })
}
