//! API Gateway HTTP API (payload v2) → the endpoint's `Service` → API Gateway, through
//! lambda_http.

use std::convert::Infallible;

use lambda_http::{Body, RequestExt};

use crate::app::edge::{Service, new_request_id};
use crate::app::ports::Served;
use crate::platform::Response;
use crate::platform::deadline::Deadline;
use crate::platform::endpoint::Endpoint;

pub use super::Error;

/// The whole of an HTTP Lambda's `main`: the start-up ([`super::start`]), then the runtime loop.
pub async fn run<E: Served>() -> Result<(), Error> {
    let service = &super::start::<E>().await?;
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
    mut event: lambda_http::Request,
) -> lambda_http::Response<Body> {
    let context = event.lambda_context_ref();
    let request_id = context
        .map(|c| c.request_id.clone())
        .filter(|id| !id.is_empty())
        .unwrap_or_else(new_request_id);
    // The invocation's deadline, which the edge spends (`crate::platform::deadline`); a context without
    // one (0) leaves the route's timeout.
    if let Some(deadline) = context.and_then(|c| Deadline::from_lambda(c.deadline)) {
        event.extensions_mut().insert(deadline);
    }
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
