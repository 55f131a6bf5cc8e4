//! A stand-in EventBridge on loopback for processes that use the real SDK
//! (`AWS_ENDPOINT_URL_EVENTBRIDGE`): answers `AWSEvents.PutEvents` (AWS JSON 1.1) with one event
//! id per entry and records the entries; anything else gets EventBridge's unknown-operation
//! error. Signatures are not checked (the SDK signs; a stand-in has no secret to check them with).

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::loopback::{self, Loopback, aws_json_1_1 as respond};

/// One entry of a PutEvents call, as sent.
#[derive(Debug, Clone)]
pub struct PutEntry {
    pub source: String,
    pub detail_type: String,
    pub detail: Value,
    pub event_bus_name: String,
}

pub struct StandInEventBridge {
    server: Loopback,
    entries: Arc<Mutex<Vec<PutEntry>>>,
}

impl StandInEventBridge {
    pub async fn start() -> StandInEventBridge {
        let entries = Arc::new(Mutex::new(Vec::new()));
        let recorded = entries.clone();
        let server = Loopback::start("stand-in EventBridge", move |request| {
            let entries = recorded.clone();
            async move {
                let target = loopback::amz_target(&request);
                let body = loopback::body_bytes(request.into_body()).await;
                answer(&entries, &target, &body)
            }
        })
        .await;
        StandInEventBridge { server, entries }
    }

    /// The value for `AWS_ENDPOINT_URL_EVENTBRIDGE`.
    pub fn endpoint(&self) -> String {
        self.server.url()
    }

    /// Every entry put so far, in order.
    pub fn entries(&self) -> Vec<PutEntry> {
        self.entries.lock().unwrap().clone()
    }
}

fn answer(entries: &Mutex<Vec<PutEntry>>, target: &str, body: &[u8]) -> loopback::Response {
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
