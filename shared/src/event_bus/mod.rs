//! The `EventBus` port: error notifications for the team chat.

use async_trait::async_trait;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

pub mod eventbridge;
pub mod grouped;

/// EventBridge `source` of every notification.
pub const SOURCE: &str = "koe.backend";
/// EventBridge `detail-type` of an error notification.
pub const DETAIL_TYPE: &str = "Koe Error Notification";

/// One 5xx (or /api/error) answer. Carries no personal data: no bodies, no ids from the client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorNotification {
    pub function: String,
    pub route: String,
    pub code: &'static str,
    pub status: u16,
    pub request_id: String,
    #[serde(serialize_with = "rfc3339_millis")]
    pub time: DateTime<Utc>,
    /// How many notifications of the same kind were grouped since the last one for the chat
    /// (`grouped::Grouped`); 0 when none were.
    pub repeats: u32,
    /// A repeat within a minute of one that went to the chat: on the bus, not for the chat.
    pub grouped: bool,
}

fn rfc3339_millis<S: serde::Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PublishError(pub String);

#[async_trait]
pub trait EventBus: Send + Sync {
    async fn publish(&self, notification: &ErrorNotification) -> Result<(), PublishError>;
}

/// For local runs: the notification becomes one JSON log line.
pub struct LogEventBus;

#[async_trait]
impl EventBus for LogEventBus {
    async fn publish(&self, n: &ErrorNotification) -> Result<(), PublishError> {
        tracing::error!(
            notification = DETAIL_TYPE,
            function = %n.function,
            route = %n.route,
            code = n.code,
            status = n.status,
            request_id = %n.request_id,
            repeats = n.repeats,
            grouped = n.grouped,
            "error notification"
        );
        Ok(())
    }
}
