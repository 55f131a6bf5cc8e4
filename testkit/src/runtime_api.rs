//! A Lambda Runtime API emulator on loopback, for running a function's real built binary.
//!
//! Serves what a Lambda binary's runtime client talks to (the `bench/bench.py` stand-in, in
//! Rust): `GET /2018-06-01/runtime/invocation/next` hands out the queued events one at a time
//! (waiting until one is queued) with the `Lambda-Runtime-*` headers; `POST
//! .../invocation/{id}/response`, `.../invocation/{id}/error` and `/2018-06-01/runtime/init/error`
//! come back to the test as [`Outcome`]s. Point the binary's `AWS_LAMBDA_RUNTIME_API` at
//! [`RuntimeApi::address`]. One emulator per process under test: dropping it stops the server
//! and every connection (a killed process's pending `next` cannot take the next test's event).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{Mutex, mpsc};
use tokio::task::{JoinHandle, JoinSet};

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
    addr: SocketAddr,
    queue: mpsc::UnboundedSender<Invocation>,
    outcomes: Mutex<mpsc::UnboundedReceiver<Outcome>>,
    task: JoinHandle<()>,
    next_id: std::sync::atomic::AtomicU64,
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RuntimeApi {
    /// Starts on a free loopback port, with no event queued.
    pub async fn start() -> RuntimeApi {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the runtime API emulator");
        let addr = listener.local_addr().expect("local address");
        let (queue, queued) = mpsc::unbounded_channel();
        let (outcome_tx, outcomes) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            queue: Mutex::new(queued),
            outcomes: outcome_tx,
        });
        RuntimeApi {
            addr,
            queue,
            outcomes: Mutex::new(outcomes),
            task: tokio::spawn(serve(listener, shared)),
            next_id: Default::default(),
        }
    }

    /// The value for `AWS_LAMBDA_RUNTIME_API` (`host:port`, no scheme).
    pub fn address(&self) -> String {
        self.addr.to_string()
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

/// Accepts connections until aborted; the connections live in a `JoinSet` owned by this task,
/// so aborting it aborts them too.
async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        while connections.try_join_next().is_some() {}
        let shared = shared.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(answer(&shared, request).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn reply(status: u16, body: impl Into<Bytes>) -> hyper::Response<Full<Bytes>> {
    hyper::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body.into()))
        .expect("a valid response")
}

async fn answer(
    shared: &Shared,
    request: hyper::Request<Incoming>,
) -> hyper::Response<Full<Bytes>> {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
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
