//! The streaming chat Lambda (`chat-stream`): POST /api/chat behind a Lambda function URL with
//! `InvokeMode: RESPONSE_STREAM` (API Gateway HTTP APIs cannot stream). lambda_http's response
//! streaming sends each server-sent event as the handler produces it. The function URL's event is
//! API Gateway's payload v2, so lambda_http reads it as it reads the HTTP API's. A request
//! without `Accept: text/event-stream` gets the JSON answer, as from the chat function.

use std::convert::Infallible;

use lambda_http::RequestExt;

use crate::app::edge::{EventBody, Service, new_request_id};
use crate::app::lambda::http::Error;
use crate::chat::api::ChatStream;
use crate::platform::endpoint::Endpoint;
use crate::platform::error::{ApiError, ErrorCode};

/// The whole of the `chat-stream` binary's `main`.
pub async fn run() -> Result<(), Error> {
    let service = &super::start::<ChatStream>().await?;
    lambda_http::run_with_streaming_response(lambda_http::service_fn(
        move |event: lambda_http::Request| async move {
            Ok::<_, Infallible>(handle_event(service, event).await)
        },
    ))
    .await
}

/// One function URL request through the chat service. The URL serves only POST /api/chat
/// (a function URL passes every path and method to its function).
pub async fn handle_event(
    service: &Service<ChatStream>,
    event: lambda_http::Request,
) -> http::Response<EventBody> {
    let request_id = event
        .lambda_context_ref()
        .map(|c| c.request_id.clone())
        .filter(|id| !id.is_empty())
        .unwrap_or_else(new_request_id);
    let route = ChatStream::ROUTE;
    if event.uri().path() != route.path {
        return miss(ApiError::new(ErrorCode::NotFound, "no such route"));
    }
    if event.method() != route.method {
        return miss(
            ApiError::new(
                ErrorCode::MethodNotAllowed,
                "method not allowed on this path (allowed: POST)",
            )
            .with_header(http::header::ALLOW, http::HeaderValue::from_static("POST")),
        );
    }
    service.handle_streaming(&request_id, event).await
}

fn miss(error: ApiError) -> http::Response<EventBody> {
    error.into_response().map(EventBody::whole)
}
