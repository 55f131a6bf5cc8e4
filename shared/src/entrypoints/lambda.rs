//! API Gateway HTTP API (payload v2) → `App::handle_with` (the function's own handler) → API
//! Gateway, through lambda_http.

use std::convert::Infallible;

use bytes::Bytes;
use lambda_http::{Body, RequestExt};

use crate::api::{Request, Response};
use crate::app::{App, Handler, handlers};
use crate::config::{Config, ConfigError, StoreKind};
use crate::routes::Endpoint;
use crate::wiring::Function;

pub type Error = lambda_http::Error;

/// The whole of an HTTP Lambda's `main`: logging, config (a bad value stops the start-up with a
/// message naming the variable), the function built once per container by `wire` (its
/// constructor in [`crate::wiring`], which decides what the binary links), then the runtime
/// loop.
pub async fn run(wire: impl AsyncFnOnce(Config) -> Function) -> Result<(), Error> {
    crate::telemetry::init_lambda();
    let config =
        Config::from_env().inspect_err(|e| tracing::error!(error = %e, "start-up failed"))?;
    let store = config.store.kind;
    let Function {
        endpoint,
        handler,
        app,
    } = wire(config).await;
    if endpoint.uses_store() && store != StoreKind::DynamoDb {
        // An in-memory store in a Lambda would lose every write with the container.
        let e = ConfigError {
            var: "STORE",
            reason: "must be dynamodb in a Lambda that stores data".into(),
        };
        tracing::error!(error = %e, "start-up failed");
        return Err(e.into());
    }
    let app = &app;
    lambda_http::run(lambda_http::service_fn(
        move |event: lambda_http::Request| async move {
            Ok::<_, Infallible>(handle_event_with(app, endpoint, handler, event).await)
        },
    ))
    .await
}

/// One API Gateway event through the app, for `endpoint` with its handler chosen at run time
/// (tests).
pub async fn handle_event(
    app: &App,
    endpoint: Endpoint,
    event: lambda_http::Request,
) -> lambda_http::Response<Body> {
    handle_event_with(app, endpoint, handlers::of(endpoint), event).await
}

/// One API Gateway event through the app, answered by `handler`.
pub async fn handle_event_with(
    app: &App,
    endpoint: Endpoint,
    handler: Handler,
    event: lambda_http::Request,
) -> lambda_http::Response<Body> {
    let request_id = event
        .lambda_context_ref()
        .map(|c| c.request_id.clone())
        .filter(|id| !id.is_empty())
        .unwrap_or_else(crate::entrypoints::local::new_request_id);
    let response = app
        .handle_with(endpoint, handler, &request_id, to_request(event))
        .await;
    to_lambda_response(response)
}

pub fn to_request(event: lambda_http::Request) -> Request {
    let (parts, body) = event.into_parts();
    let bytes = match body {
        Body::Empty => Bytes::new(),
        Body::Text(text) => Bytes::from(text),
        Body::Binary(data) => Bytes::from(data),
        _ => Bytes::new(),
    };
    Request::from_parts(parts, bytes)
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
