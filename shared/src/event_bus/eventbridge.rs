//! EventBridge PutEvents: error notifications (routed to the team chat by the template), and the
//! one-entry publisher other events (a requested dispatch run) share.

use async_trait::async_trait;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use tokio::sync::OnceCell;

use super::{DETAIL_TYPE, ErrorNotification, EventBus, PublishError, SOURCE};
use crate::platform::aws::LoadConfig;

/// Puts single events on one bus. The SDK client is built on the first event, not at cold
/// start: most containers never publish, and building it costs start-up time on every one.
pub struct Publisher {
    bus_name: String,
    /// Where the client's configuration comes from (see `crate::platform::aws`).
    load: LoadConfig,
    client: OnceCell<aws_sdk_eventbridge::Client>,
}

impl Publisher {
    pub fn new(bus_name: String, load: LoadConfig) -> Publisher {
        Publisher {
            bus_name,
            load,
            client: OnceCell::new(),
        }
    }

    async fn client(&self) -> &aws_sdk_eventbridge::Client {
        self.client
            .get_or_init(|| async {
                let config = (self.load)().await;
                aws_sdk_eventbridge::Client::new(&config)
            })
            .await
    }

    /// Publishes one event; an error says why (never the detail, which callers keep free of
    /// personal data anyway).
    pub async fn put(
        &self,
        source: &str,
        detail_type: &str,
        detail: String,
    ) -> Result<(), PublishError> {
        let entry = PutEventsRequestEntry::builder()
            .event_bus_name(&self.bus_name)
            .source(source)
            .detail_type(detail_type)
            .detail(detail)
            .build();
        let output = self
            .client()
            .await
            .put_events()
            .entries(entry)
            .send()
            .await
            .map_err(|e| {
                PublishError(format!(
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
            return Err(PublishError(format!(
                "PutEvents rejected the entry: {reason}"
            )));
        }
        Ok(())
    }
}

/// Error notifications on the stack's bus.
pub struct EventBridgeBus {
    publisher: Publisher,
}

impl EventBridgeBus {
    pub fn new(bus_name: String, load: LoadConfig) -> EventBridgeBus {
        EventBridgeBus {
            publisher: Publisher::new(bus_name, load),
        }
    }
}

#[async_trait]
impl EventBus for EventBridgeBus {
    async fn publish(&self, n: &ErrorNotification) -> Result<(), PublishError> {
        let detail = serde_json::to_string(n).map_err(|e| PublishError(e.to_string()))?;
        self.publisher.put(SOURCE, DETAIL_TYPE, detail).await
    }
}
