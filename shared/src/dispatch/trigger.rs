//! How POST /internal/dispatch starts a run without making its caller wait for it.
//!
//! A run lasts about 70 s, longer than API Gateway's 30 s integration timeout, so the HTTP
//! route answers 202 and hands the run on: in a Lambda, by publishing a "dispatch requested"
//! event to the stack's EventBridge bus, whose rule invokes the dispatch function
//! asynchronously (the same function that the every-minute schedule invokes); in koe-local, by
//! waking the in-process dispatcher loop.

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use tokio::sync::{Notify, OnceCell};

/// EventBridge `source` of a requested run (the template's rule matches it).
pub const SOURCE: &str = "koe.dispatch";
/// EventBridge `detail-type` of a requested run.
pub const DETAIL_TYPE: &str = "Koe Dispatch Requested";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerError(pub String);

impl std::fmt::Display for TriggerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[async_trait]
pub trait DispatchTrigger: Send + Sync {
    /// Asks for one dispatch run soon; returns once the request is handed on.
    async fn request_run(&self) -> Result<(), TriggerError>;
}

/// Wakes an in-process loop (koe-local's dispatcher loop listens on `requests`). Without a
/// listener the request waits until one starts listening.
pub struct InProcessTrigger {
    pub requests: Arc<Notify>,
}

#[async_trait]
impl DispatchTrigger for InProcessTrigger {
    async fn request_run(&self) -> Result<(), TriggerError> {
        self.requests.notify_one();
        Ok(())
    }
}

/// Publishes a "dispatch requested" event (detail `{"requestedAt"}`) to an EventBridge bus.
pub struct EventBridgeTrigger {
    bus_name: String,
    client: OnceCell<aws_sdk_eventbridge::Client>,
}

impl EventBridgeTrigger {
    pub fn new(bus_name: String) -> EventBridgeTrigger {
        EventBridgeTrigger {
            bus_name,
            client: OnceCell::new(),
        }
    }
}

#[async_trait]
impl DispatchTrigger for EventBridgeTrigger {
    async fn request_run(&self) -> Result<(), TriggerError> {
        let client = self
            .client
            .get_or_init(|| async {
                let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
                aws_sdk_eventbridge::Client::new(&config)
            })
            .await;
        let detail = serde_json::json!({ "requestedAt": crate::domain::reservation::rfc3339_millis(chrono::Utc::now()) }).to_string();
        let entry = PutEventsRequestEntry::builder()
            .event_bus_name(&self.bus_name)
            .source(SOURCE)
            .detail_type(DETAIL_TYPE)
            .detail(detail)
            .build();
        let output = client
            .put_events()
            .entries(entry)
            .send()
            .await
            .map_err(|e| {
                TriggerError(format!(
                    "PutEvents failed: {}",
                    aws_sdk_eventbridge::error::DisplayErrorContext(e)
                ))
            })?;
        if output.failed_entry_count() > 0 {
            let reason = output
                .entries()
                .first()
                .and_then(|e| e.error_code())
                .unwrap_or("unknown");
            return Err(TriggerError(format!(
                "PutEvents rejected the entry: {reason}"
            )));
        }
        Ok(())
    }
}
