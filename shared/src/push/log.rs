//! A push sender that sends nothing: it writes one JSON log line per push, so a local run (or a
//! deployment without APNs credentials) shows when each call would have rung.

use async_trait::async_trait;
use chrono::Utc;

use super::{Notice, PushError, PushSender, VoipPush};
use crate::domain::device::Device;
use crate::domain::reservation::rfc3339_millis;

/// The log line's message, for anyone grepping for pushes.
pub const MESSAGE: &str = "voip push (logged, not sent)";
/// The log line's message of a missed-call notice (an alert push).
pub const ALERT_MESSAGE: &str = "alert push (logged, not sent)";

pub struct LogPushSender {
    /// Salt of the device hash in the line (the device id itself never appears).
    salt: String,
}

impl LogPushSender {
    pub fn new(salt: impl Into<String>) -> LogPushSender {
        LogPushSender { salt: salt.into() }
    }
}

#[async_trait]
impl PushSender for LogPushSender {
    async fn send(&self, push: &VoipPush, device: &Device) -> Result<(), PushError> {
        // No token, no caller name, no device id: the call id, when, and where it would go.
        tracing::info!(
            callId = push.call_id.as_str(),
            sentAt = rfc3339_millis(Utc::now()),
            device = device.device_id.log_hash(&self.salt),
            environment = device.environment.as_str(),
            "{MESSAGE}"
        );
        Ok(())
    }

    async fn send_notice(&self, notice: Notice<'_>) -> Result<(), PushError> {
        // No token, no device id, no caller name: the call and why it ended.
        tracing::info!(
            callId = notice.push.call_id.as_str(),
            reason = notice.push.reason,
            sentAt = rfc3339_millis(Utc::now()),
            "{ALERT_MESSAGE}"
        );
        Ok(())
    }
}
