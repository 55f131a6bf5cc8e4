//! The dispatch Lambda: one function for every kind of dispatch event.
//!
//! - The every-minute EventBridge schedule (`source: aws.events`): one dispatch run.
//! - A requested run (`source: koe.dispatch`, published by POST /internal/dispatch): one run.
//! - A wake (`source: koe.dispatch`, detail-type "Koe Dispatch Wake", published by POST /calls
//!   for a call no run is sure to cover, `dispatch::wake`): one run that stays until `until`.
//!   These three coordinate: a minute too big for one invocation is split into parts
//!   (`dispatch::fan_out`), the others handed out as events.
//! - A part of a split minute (`source: koe.dispatch`, detail-type "Koe Dispatch Part").
//! - API Gateway HTTP API (payload v2, has `requestContext`): POST /internal/dispatch through
//!   the same `App::handle` as every route (OIDC check, 202, access log), answered in API
//!   Gateway's response shape.
//!
//! The payload arrives as JSON and is told apart here, so a single binary serves both the
//! schedule and the route.

use lambda_http::RequestExt;
use lambda_http::aws_lambda_events::apigw::ApiGatewayV2httpResponse;
use lambda_http::request::LambdaRequest;
use lambda_runtime::{LambdaEvent, service_fn};
use serde_json::{Value, json};

use crate::app::edge::Service;
use crate::app::lambda::http::{Error, handle_event};
use crate::dispatch::api::Dispatch;
use crate::dispatch::trigger;
use crate::dispatch::{RunCause, RunReport};
use crate::domain::due::Part;

/// What an invocation carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invocation {
    Http,
    /// The schedule or a requested run: a coordinating run (it may split a big minute).
    Run(RunCause),
    /// A part of a split minute.
    Part(Part),
    /// A wake: a coordinating run that stays until then.
    Wake(chrono::DateTime<chrono::Utc>),
    Unknown,
}

pub fn classify(payload: &Value) -> Invocation {
    if payload.get("requestContext").is_some() {
        return Invocation::Http;
    }
    match (
        payload.get("source").and_then(Value::as_str),
        payload.get("detail-type").and_then(Value::as_str),
    ) {
        (Some("aws.events"), Some("Scheduled Event")) => Invocation::Run(RunCause::Schedule),
        (Some(trigger::SOURCE), Some(trigger::DETAIL_TYPE)) => Invocation::Run(RunCause::Request),
        (Some(trigger::SOURCE), Some(trigger::WAKE_DETAIL_TYPE)) => payload
            .get("detail")
            .and_then(trigger::until_of)
            .map_or(Invocation::Unknown, Invocation::Wake),
        (Some(trigger::SOURCE), Some(trigger::PART_DETAIL_TYPE)) => payload
            .get("detail")
            .and_then(trigger::part_of)
            .map_or(Invocation::Unknown, Invocation::Part),
        _ => Invocation::Unknown,
    }
}

/// The whole of the dispatch Lambda's `main`.
pub async fn run() -> Result<(), Error> {
    // Its own adapters only: store, push, OIDC, and the bus as the trigger of requested runs
    // (the store must be DynamoDB and EVENT_BUS_NAME set, or the start-up fails naming them).
    let service = &super::start::<Dispatch>().await?;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        handle(service, event).await
    }))
    .await
}

/// One invocation: an HTTP answer in API Gateway's shape, or a run's summary.
pub async fn handle(
    service: &Service<Dispatch>,
    event: LambdaEvent<Value>,
) -> Result<Value, Error> {
    let LambdaEvent { payload, context } = event;
    match classify(&payload) {
        Invocation::Http => {
            let request: LambdaRequest = serde_json::from_value(payload)?;
            let request = http::Request::from(request).with_lambda_context(context);
            let response = handle_event(service, request).await;
            Ok(serde_json::to_value(api_gateway_response(response))?)
        }
        Invocation::Run(cause) => {
            let report = service.ports().dispatcher.coordinate(cause).await;
            Ok(summary(&report))
        }
        Invocation::Wake(until) => {
            let report = service.ports().dispatcher.woken(until).await;
            Ok(summary(&report))
        }
        Invocation::Part(part) => {
            let report = service
                .ports()
                .dispatcher
                .run_part(RunCause::Part, part)
                .await;
            Ok(summary(&report))
        }
        Invocation::Unknown => {
            tracing::error!("dispatch invoked with an event it does not know");
            Err(
                "not an API Gateway HTTP API, schedule, dispatch-request or dispatch-part event"
                    .into(),
            )
        }
    }
}

fn summary(report: &RunReport) -> Value {
    json!({
        "cause": report.cause,
        "claimed": report.claimed,
        "sent": report.sent,
        "failed": report.failed,
        "missed": report.missed,
        "lost": report.lost,
        "handedOut": report.handed_out,
        "maxLatenessMs": report.max_lateness_ms(),
        "durationMs": report.duration_ms,
    })
}

/// An `http::Response` as API Gateway HTTP API (v2) expects it back from the Lambda.
pub fn api_gateway_response(
    response: lambda_http::Response<lambda_http::Body>,
) -> ApiGatewayV2httpResponse {
    let (parts, body) = response.into_parts();
    let mut out = ApiGatewayV2httpResponse::default();
    out.status_code = i64::from(parts.status.as_u16());
    out.headers = parts.headers;
    out.is_base64_encoded = matches!(body, lambda_http::Body::Binary(_));
    out.body = match body {
        lambda_http::Body::Empty => None,
        other => Some(other),
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_told_apart() {
        assert_eq!(
            classify(&json!({"requestContext": {"http": {}}, "rawPath": "/internal/dispatch"})),
            Invocation::Http
        );
        assert_eq!(
            classify(&json!({"source": "aws.events", "detail-type": "Scheduled Event"})),
            Invocation::Run(RunCause::Schedule)
        );
        assert_eq!(
            classify(&json!({"source": "koe.dispatch", "detail-type": "Koe Dispatch Requested"})),
            Invocation::Run(RunCause::Request)
        );
        assert_eq!(
            classify(
                &json!({"source": "koe.dispatch", "detail-type": "Koe Dispatch Wake",
                "detail": {"dueAt": "2026-01-01T07:00:00.000Z", "until": "2026-01-01T07:00:15.000Z"}})
            ),
            Invocation::Wake("2026-01-01T07:00:15Z".parse().unwrap())
        );
        assert_eq!(
            classify(
                &json!({"source": "koe.dispatch", "detail-type": "Koe Dispatch Part",
                "detail": {"part": 2, "of": 3}})
            ),
            Invocation::Part(Part::new(2, 3).unwrap())
        );
        for other in [
            json!({"source": "koe.dispatch", "detail-type": "Koe Dispatch Part",
                "detail": {"part": 3, "of": 3}}),
            json!({"source": "koe.dispatch", "detail-type": "Koe Dispatch Part", "detail": {}}),
            json!({"source": "koe.dispatch", "detail-type": "Koe Dispatch Wake", "detail": {}}),
            json!({}),
            json!({"source": "koe.backend", "detail-type": "Koe Error Notification"}),
            json!({"source": "aws.events", "detail-type": "EC2 Instance State-change"}),
        ] {
            assert_eq!(classify(&other), Invocation::Unknown, "{other}");
        }
    }
}
