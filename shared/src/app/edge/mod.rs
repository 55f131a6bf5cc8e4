//! `Service<E>`: one endpoint with its ports, and the one path every request takes through it:
//! authentication before the body, the body cap, the handler, the error body, the error
//! notification for a 5xx, the request id header and the access log line, all inside a span
//! that puts the request id on every log line of the request.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::FutureExt;
use http::HeaderValue;
use tracing::Instrument;

use crate::event_bus::{ErrorNotification, EventBus};
use crate::platform::body::read_limited;
use crate::platform::clock::Clock;
use crate::platform::config::{ApiKeys, Secret};
use crate::platform::deadline::{self, Deadline};
use crate::platform::endpoint::{Auth, Endpoint, Route, bearer_refusal, bearer_token};
use crate::platform::error::{ApiError, ErrorCode};
use crate::platform::metrics::Metrics;
use crate::platform::metrics::catalogue::API;
use crate::platform::secrets::LiveSecret;
use crate::platform::{Request, Response};

mod stream;
pub use stream::EventBody;

/// How long an error notification may hold up the error answer.
pub const NOTIFY_TIMEOUT: Duration = Duration::from_secs(2);

/// What every endpoint has besides its own ports.
#[derive(Clone)]
pub struct Edge {
    pub events: Arc<dyn EventBus>,
    pub clock: Arc<dyn Clock>,
    /// The function named in error notifications (`AWS_LAMBDA_FUNCTION_NAME`, else the binary).
    pub function: String,
    /// Each request's metrics (dimension `Function` = `function`).
    pub metrics: Metrics,
    /// The accepted `X-Api-Key`s (empty for endpoints that take none: nothing is accepted).
    pub api_keys: LiveApiKeys,
}

impl Edge {
    /// A request's record ([`request_record`]).
    pub fn measure(&self, latency_ms: i64, status: http::StatusCode) {
        self.metrics.emit(&request_record(
            self.metrics.function(),
            self.clock.now(),
            latency_ms,
            status,
        ));
    }
}

/// A request's `Koe/Api` record: its latency, and `ServerErrors` or `ClientErrors` 1 when it
/// answered 5xx or 4xx (nothing for a success: the alarms read a period without one as 0, and
/// a zero would cost a metric-hour).
pub fn request_record(
    function: &str,
    at: chrono::DateTime<chrono::Utc>,
    latency_ms: i64,
    status: http::StatusCode,
) -> crate::platform::metrics::Record {
    let record = crate::platform::metrics::Record::new(API, at)
        .dimension("Function", function)
        .millis("Latency", latency_ms);
    if status.is_server_error() {
        record.count("ServerErrors", 1)
    } else if status.is_client_error() {
        record.count("ClientErrors", 1)
    } else {
        record
    }
}

/// The agent API's keys as their secret holds them now: re-parsed when it changes, and read
/// again when a request brings a key not among them (a key just added in Secrets Manager is
/// accepted at once; at most one read per `secrets::MIN_GAP`, however many bad keys come).
#[derive(Clone)]
pub struct LiveApiKeys {
    secret: LiveSecret,
    /// The keys parsed from the secret's value they came from.
    parsed: Arc<std::sync::Mutex<(Option<Secret>, ApiKeys)>>,
}

impl LiveApiKeys {
    pub fn new(secret: LiveSecret) -> LiveApiKeys {
        LiveApiKeys {
            secret,
            parsed: Arc::new(std::sync::Mutex::new((None, ApiKeys::parse(None)))),
        }
    }

    /// No key at all (endpoints that take none).
    pub fn none() -> LiveApiKeys {
        LiveApiKeys::new(LiveSecret::fixed("AGENT_API_KEYS", None))
    }

    fn keys(&self) -> ApiKeys {
        let value = self.secret.current();
        let mut parsed = self.parsed.lock().unwrap_or_else(|p| p.into_inner());
        if parsed.0 != value {
            *parsed = (
                value.clone(),
                ApiKeys::parse(value.as_ref().map(Secret::expose)),
            );
        }
        parsed.1.clone()
    }

    /// Whether `presented` is one of the keys, reading them again once if it is not.
    pub async fn accepts(&self, presented: &[u8]) -> bool {
        self.keys().accepts(presented)
            || (self.secret.refused().await && self.keys().accepts(presented))
    }
}

pub struct Service<E: Endpoint> {
    route: Route,
    edge: Edge,
    ports: E::Ports,
}

impl<E: Endpoint> Service<E> {
    pub fn new(edge: Edge, ports: E::Ports) -> Service<E> {
        Service {
            route: E::ROUTE,
            edge,
            ports,
        }
    }

    pub fn route(&self) -> &Route {
        &self.route
    }

    pub fn ports(&self) -> &E::Ports {
        &self.ports
    }

    /// Answers one request. Never panics on input and always returns a response; errors carry
    /// the contract's error body. The body is read only once the request is authenticated.
    pub async fn handle<B>(&self, request_id: &str, request: http::Request<B>) -> Response
    where
        B: http_body::Body<Data = Bytes> + Unpin,
    {
        let span = tracing::info_span!("request", request_id);
        // The invocation's deadline: the Lambda context's, else the function's timeout from
        // now; the answer is out `MARGIN` before it, the handler done `ANSWER_RESERVE` before
        // that (what an error answer's notification may take).
        let invoked = tokio::time::Instant::now();
        let deadline = request
            .extensions()
            .get::<Deadline>()
            .map_or(invoked + self.route.timeout, |d| d.0);
        let end = deadline.checked_sub(deadline::MARGIN).unwrap_or(invoked);
        let handler_end = end.checked_sub(deadline::ANSWER_RESERVE).unwrap_or(invoked);
        deadline::scope(end, async {
            let started = Instant::now();
            // A panicking handler (a bug) answers this request 500 INTERNAL_ERROR, with its
            // notification, and the process goes on serving (the release profile unwinds).
            // `telemetry::install_panic_hook` logged where it happened, not its message.
            let answer = AssertUnwindSafe(deadline::scope(handler_end, self.answer(request)));
            let result = match tokio::time::timeout_at(handler_end, answer.catch_unwind()).await {
                Ok(Ok(result)) => result,
                Ok(Err(_)) => {
                    Err(ApiError::internal().caused_by("handler panicked", "see the panic line"))
                }
                Err(_) => Err(ApiError::deadline()),
            };
            self.finish(request_id, started, result).await
        })
        .instrument(span)
        .await
    }

    async fn answer<B>(&self, request: http::Request<B>) -> Result<Response, ApiError>
    where
        B: http_body::Body<Data = Bytes> + Unpin,
    {
        self.authorize(request.headers()).await?;
        let (parts, body) = request.into_parts();
        let body = read_limited(body, self.route.body_limit).await?;
        E::handle(&self.ports, Request::from_parts(parts, body)).await
    }

    /// The route's credential check, before any of the body is read. For a Bearer route only
    /// the token's presence is checked here (no I/O); the handler verifies it.
    async fn authorize(&self, headers: &http::HeaderMap) -> Result<(), ApiError> {
        let refused =
            || ApiError::new(ErrorCode::Unauthorized, "X-Api-Key is missing or not valid");
        match self.route.auth {
            Auth::None => Ok(()),
            Auth::ApiKey => match headers.get("x-api-key") {
                Some(key) if self.edge.api_keys.accepts(key.as_bytes()).await => Ok(()),
                _ => Err(refused()),
            },
            Auth::Bearer => bearer_token(headers.get(http::header::AUTHORIZATION))
                .map(|_| ())
                .map_err(|_| bearer_refusal()),
        }
    }

    /// Turns a result into the answer: error body, error notification for 5xx, request id
    /// header, access log line.
    async fn finish(
        &self,
        request_id: &str,
        started: Instant,
        result: Result<Response, ApiError>,
    ) -> Response {
        let (mut response, code) = match result {
            Ok(response) => (response, None),
            Err(mut error) => {
                if let Some((what, detail)) = error.cause.take() {
                    tracing::error!(error = %detail, "{what}");
                }
                let code = error.code;
                if error.status().is_server_error() && error.notify {
                    self.notify(code, request_id).await;
                }
                (error.into_response(), Some(code))
            }
        };
        if let Ok(value) = HeaderValue::from_str(request_id) {
            response.headers_mut().insert("x-request-id", value);
        }
        let status = response.status();
        let latency_ms = started.elapsed().as_millis() as i64;
        // Only the route's template path: query strings and bodies may carry personal data.
        tracing::info!(
            request_id,
            method = %self.route.method,
            route = self.route.path,
            status = status.as_u16(),
            code = code.map(ErrorCode::as_str),
            latency_ms,
            "request"
        );
        self.edge.measure(latency_ms, status);
        response
    }

    async fn notify(&self, code: ErrorCode, request_id: &str) {
        notify(&self.edge, &self.route, code, request_id).await
    }
}

/// Publishes one error notification. A failure is logged and changes nothing else.
async fn notify(edge: &Edge, route: &Route, code: ErrorCode, request_id: &str) {
    let notification = ErrorNotification {
        function: edge.function.clone(),
        route: format!("{} {}", route.method, route.path),
        code: code.as_str(),
        status: code.status().as_u16(),
        request_id: request_id.to_owned(),
        time: edge.clock.now(),
        repeats: 0,
        grouped: false,
    };
    let limit = deadline::cap(NOTIFY_TIMEOUT);
    match tokio::time::timeout(limit, edge.events.publish(&notification)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, code = code.as_str(), "error notification not published")
        }
        Err(_) => tracing::warn!(code = code.as_str(), "error notification timed out"),
    }
}

/// A request id for a request that arrives without one (the local server's).
pub fn new_request_id() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// Any body, boxed: what a server that routes at run time hands every service.
pub type BoxBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A service with its endpoint type erased, for a server that routes at run time (koe-local):
/// every endpoint's `Service` is one.
pub trait Answer: Send + Sync {
    fn route(&self) -> &Route;
    fn answer<'a>(
        &'a self,
        request_id: &'a str,
        request: http::Request<BoxBody>,
    ) -> Pin<Box<dyn Future<Output = Response> + Send + 'a>>;
}

impl<E: Endpoint> Answer for Service<E> {
    fn route(&self) -> &Route {
        &self.route
    }

    fn answer<'a>(
        &'a self,
        request_id: &'a str,
        request: http::Request<BoxBody>,
    ) -> Pin<Box<dyn Future<Output = Response> + Send + 'a>> {
        Box::pin(self.handle(request_id, request))
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;
    use serde_json::Value;

    use super::*;

    /// The record's one line, and the metric names its directive declares.
    fn line(status: u16) -> (Value, Vec<String>) {
        let at = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let status = StatusCode::from_u16(status).unwrap();
        let lines = request_record("koe-chat", at, 42, status).lines();
        assert_eq!(lines.len(), 1);
        let line: Value = serde_json::from_str(&lines[0]).unwrap();
        let names = line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["Name"].as_str().unwrap().to_owned())
            .collect();
        (line, names)
    }

    #[test]
    fn a_request_writes_its_latency_and_an_error_count_only_when_it_failed() {
        let (ok, names) = line(200);
        assert_eq!(names, ["Latency"]);
        assert_eq!(ok["Latency"], 42);
        assert_eq!(ok["Function"], "koe-chat");
        assert!(ok.get("ServerErrors").is_none() && ok.get("ClientErrors").is_none());
        let (server, names) = line(503);
        assert_eq!(names, ["Latency", "ServerErrors"]);
        assert_eq!(server["ServerErrors"], 1);
        let (client, names) = line(404);
        assert_eq!(names, ["Latency", "ClientErrors"]);
        assert_eq!(client["ClientErrors"], 1);
        assert_eq!(line(302).1, ["Latency"], "a redirect is no error");
    }
}
