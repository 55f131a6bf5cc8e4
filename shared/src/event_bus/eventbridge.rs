//! Error notifications as EventBridge events (PutEvents), routed to the team chat by the template.

use async_trait::async_trait;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use tokio::sync::OnceCell;

use super::{DETAIL_TYPE, ErrorNotification, EventBus, PublishError, SOURCE};

/// Publishes to one bus. The SDK client is built on the first notification, not at cold start:
/// most containers never publish, and building it costs start-up time on every one.
pub struct EventBridgeBus {
    bus_name: String,
    client: OnceCell<aws_sdk_eventbridge::Client>,
}

impl EventBridgeBus {
    pub fn new(bus_name: String) -> EventBridgeBus {
        EventBridgeBus {
            bus_name,
            client: OnceCell::new(),
        }
    }

    async fn client(&self) -> &aws_sdk_eventbridge::Client {
        self.client
            .get_or_init(|| async {
                let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
                aws_sdk_eventbridge::Client::new(&config)
            })
            .await
    }
}

#[async_trait]
impl EventBus for EventBridgeBus {
    async fn publish(&self, n: &ErrorNotification) -> Result<(), PublishError> {
        let detail = serde_json::to_string(n).map_err(|e| PublishError(e.to_string()))?;
        let entry = PutEventsRequestEntry::builder()
            .event_bus_name(&self.bus_name)
            .source(SOURCE)
            .detail_type(DETAIL_TYPE)
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
                .unwrap_or("unknown")
                .to_owned();
            return Err(PublishError(format!(
                "PutEvents rejected the entry: {reason}"
            )));
        }
        Ok(())
    }
}
