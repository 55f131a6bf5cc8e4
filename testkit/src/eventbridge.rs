//! A stand-in EventBridge on loopback for processes that use the real SDK
//! (`AWS_ENDPOINT_URL_EVENTBRIDGE`): answers `AWSEvents.PutEvents` (AWS JSON 1.1) with one event
//! id per entry and records the entries; anything else gets EventBridge's unknown-operation
//! error. Signatures are not checked (the SDK signs; a stand-in has no secret to check them with).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One entry of a PutEvents call, as sent.
#[derive(Debug, Clone)]
pub struct PutEntry {
    pub source: String,
    pub detail_type: String,
    pub detail: Value,
    pub event_bus_name: String,
}

pub struct StandInEventBridge {
    addr: SocketAddr,
    entries: Arc<Mutex<Vec<PutEntry>>>,
    task: JoinHandle<()>,
}

impl Drop for StandInEventBridge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandInEventBridge {
    pub async fn start() -> StandInEventBridge {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind stand-in EventBridge");
        let addr = listener.local_addr().unwrap();
        let entries = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(serve(listener, entries.clone()));
        StandInEventBridge {
            addr,
            entries,
            task,
        }
    }

    /// The value for `AWS_ENDPOINT_URL_EVENTBRIDGE`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every entry put so far, in order.
    pub fn entries(&self) -> Vec<PutEntry> {
        self.entries.lock().unwrap().clone()
    }
}

async fn serve(listener: TcpListener, entries: Arc<Mutex<Vec<PutEntry>>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let entries = entries.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let entries = entries.clone();
                async move {
                    let target = request
                        .headers()
                        .get("x-amz-target")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    let body = request
                        .into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    Ok::<_, Infallible>(answer(&entries, &target, &body))
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn answer(
    entries: &Mutex<Vec<PutEntry>>,
    target: &str,
    body: &[u8],
) -> hyper::Response<Full<Bytes>> {
    let respond = |status: u16, body: Value| {
        hyper::Response::builder()
            .status(status)
            .header("content-type", "application/x-amz-json-1.1")
            .header("x-amzn-requestid", "00000000-0000-0000-0000-000000000000")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap()
    };
    if target != "AWSEvents.PutEvents" {
        return respond(
            400,
            json!({"__type": "UnknownOperationException", "message": format!("stand-in knows PutEvents only, not {target:?}")}),
        );
    }
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return respond(
            400,
            json!({"__type": "SerializationException", "message": "body is not JSON"}),
        );
    };
    let field = |entry: &Value, name: &str| entry[name].as_str().unwrap_or_default().to_owned();
    let mut recorded = entries.lock().unwrap();
    let mut ids = Vec::new();
    for entry in request["Entries"].as_array().into_iter().flatten() {
        recorded.push(PutEntry {
            source: field(entry, "Source"),
            detail_type: field(entry, "DetailType"),
            detail: serde_json::from_str(&field(entry, "Detail")).unwrap_or(Value::Null),
            event_bus_name: field(entry, "EventBusName"),
        });
        ids.push(json!({ "EventId": format!("stand-in-{}", recorded.len()) }));
    }
    respond(200, json!({ "FailedEntryCount": 0, "Entries": ids }))
}
