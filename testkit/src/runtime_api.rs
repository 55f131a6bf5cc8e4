//! A Lambda Runtime API emulator on loopback, for running a function's real built binary.
//!
//! Serves what a Lambda binary's runtime client talks to (the `bench/bench.py` stand-in, in
//! Rust): `GET /2018-06-01/runtime/invocation/next` hands out the queued events one at a time
//! (waiting until one is queued) with the `Lambda-Runtime-*` headers; `POST
//! .../invocation/{id}/response`, `.../invocation/{id}/error` and `/2018-06-01/runtime/init/error`
//! come back to the test as [`Outcome`]s. Point the binary's `AWS_LAMBDA_RUNTIME_API` at
//! [`RuntimeApi::address`]. One emulator per process under test: dropping it stops the server
//! and every connection (a killed process's pending `next` cannot take the next test's event).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use serde_json::Value;
use tokio::sync::{Mutex, mpsc};

use crate::loopback::{self, Loopback, json as reply};

const PREFIX: &str = "/2018-06-01/runtime";
/// The ARN every invocation reports as the invoked function's.
pub const FUNCTION_ARN: &str = "arn:aws:lambda:ap-northeast-1:123456789012:function:koe-test";
/// The X-Ray trace header every invocation carries.
pub const TRACE_ID: &str = "Root=1-00000000-000000000000000000000000;Sampled=0";
/// How long each invocation may run (`Lambda-Runtime-Deadline-Ms` is now plus this).
pub const DEADLINE: Duration = Duration::from_secs(30);

/// What the function reported back.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `POST .../invocation/{id}/response`: the handler's answer.
    Response { request_id: String, body: Bytes },
    /// `POST .../invocation/{id}/error`: the handler failed.
    Error { request_id: String, body: Bytes },
    /// `POST /2018-06-01/runtime/init/error`: the function could not start.
    InitError { body: Bytes },
}

impl Outcome {
    /// The response body as JSON; panics with what came back instead.
    pub fn response_json(&self) -> Value {
        match self {
            Outcome::Response { body, .. } => serde_json::from_slice(body)
                .unwrap_or_else(|e| panic!("response is not JSON ({e}): {body:?}")),
            other => panic!("expected a response, got {}", other.describe()),
        }
    }

    fn describe(&self) -> String {
        match self {
            Outcome::Response { request_id, body } => {
                format!(
                    "response to {request_id}: {}",
                    String::from_utf8_lossy(body)
                )
            }
            Outcome::Error { request_id, body } => {
                format!("error for {request_id}: {}", String::from_utf8_lossy(body))
            }
            Outcome::InitError { body } => {
                format!("init error: {}", String::from_utf8_lossy(body))
            }
        }
    }
}

/// One queued invocation.
struct Invocation {
    request_id: String,
    event: Bytes,
}

struct Shared {
    queue: Mutex<mpsc::UnboundedReceiver<Invocation>>,
    outcomes: mpsc::UnboundedSender<Outcome>,
}

/// The emulator; dropping it stops the server and closes every connection.
pub struct RuntimeApi {
    server: Loopback,
    queue: mpsc::UnboundedSender<Invocation>,
    outcomes: Mutex<mpsc::UnboundedReceiver<Outcome>>,
    next_id: std::sync::atomic::AtomicU64,
}

impl RuntimeApi {
    /// Starts on a free loopback port, with no event queued.
    pub async fn start() -> RuntimeApi {
        let (queue, queued) = mpsc::unbounded_channel();
        let (outcome_tx, outcomes) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            queue: Mutex::new(queued),
            outcomes: outcome_tx,
        });
        let server = Loopback::start("runtime API emulator", move |request| {
            let shared = shared.clone();
            async move { answer(&shared, request).await }
        })
        .await;
        RuntimeApi {
            server,
            queue,
            outcomes: Mutex::new(outcomes),
            next_id: Default::default(),
        }
    }

    /// The value for `AWS_LAMBDA_RUNTIME_API` (`host:port`, no scheme).
    pub fn address(&self) -> String {
        self.server.addr().to_string()
    }

    /// Queues `event` for the next `GET .../invocation/next`; returns its request id.
    pub fn queue(&self, event: impl Into<Bytes>) -> String {
        let n = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let request_id = format!("00000000-0000-4000-8000-{n:012x}");
        self.queue
            .send(Invocation {
                request_id: request_id.clone(),
                event: event.into(),
            })
            .expect("the server holds the queue while the emulator lives");
        request_id
    }

    /// The next outcome the function reports, or `None` after `within`.
    pub async fn outcome(&self, within: Duration) -> Option<Outcome> {
        let mut outcomes = self.outcomes.lock().await;
        tokio::time::timeout(within, outcomes.recv())
            .await
            .ok()
            .flatten()
    }

    /// Queues `event` and waits (up to `within`) for what the function reports for it; panics on
    /// a timeout or an outcome for another invocation.
    pub async fn invoke(&self, event: impl Into<Bytes>, within: Duration) -> Outcome {
        let request_id = self.queue(event);
        let outcome = self
            .outcome(within)
            .await
            .unwrap_or_else(|| panic!("no outcome for {request_id} within {within:?}"));
        match &outcome {
            Outcome::Response { request_id: id, .. } | Outcome::Error { request_id: id, .. }
                if *id != request_id =>
            {
                panic!(
                    "expected an outcome for {request_id}, got {}",
                    outcome.describe()
                )
            }
            _ => outcome,
        }
    }
}

async fn answer(shared: &Shared, request: loopback::Request) -> loopback::Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let body = loopback::body_bytes(request.into_body()).await;
    let Some(rest) = path.strip_prefix(PREFIX) else {
        return reply(404, r#"{"errorMessage":"unknown path"}"#);
    };
    if method == http::Method::GET && rest == "/invocation/next" {
        // Waits for the test to queue an event (a function between invocations blocks here,
        // as in Lambda).
        let next = shared.queue.lock().await.recv().await;
        let Some(invocation) = next else {
            return reply(500, r#"{"errorMessage":"emulator stopped"}"#);
        };
        let deadline = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .saturating_add(DEADLINE)
            .as_millis();
        return hyper::Response::builder()
            .status(200)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header("Lambda-Runtime-Aws-Request-Id", &invocation.request_id)
            .header("Lambda-Runtime-Deadline-Ms", deadline.to_string())
            .header("Lambda-Runtime-Invoked-Function-Arn", FUNCTION_ARN)
            .header("Lambda-Runtime-Trace-Id", TRACE_ID)
            .body(Full::new(invocation.event))
            .expect("a valid response");
    }
    if method != http::Method::POST {
        return reply(405, r#"{"errorMessage":"method not allowed"}"#);
    }
    let outcome = if rest == "/init/error" {
        Outcome::InitError { body }
    } else if let Some(tail) = rest.strip_prefix("/invocation/") {
        match tail.split_once('/') {
            Some((id, "response")) => Outcome::Response {
                request_id: id.to_owned(),
                body,
            },
            Some((id, "error")) => Outcome::Error {
                request_id: id.to_owned(),
                body,
            },
            _ => return reply(404, r#"{"errorMessage":"unknown path"}"#),
        }
    } else {
        return reply(404, r#"{"errorMessage":"unknown path"}"#);
    };
    // The test may have stopped listening; the function's report is accepted either way.
    let _ = shared.outcomes.send(outcome);
    reply(202, r#"{"status":"OK"}"#)
}
