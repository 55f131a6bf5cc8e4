//! A push sender that sends nothing: it writes one JSON log line per push, so a local run (or a
//! deployment without APNs credentials) shows when each call would have rung and what the phone
//! would have got: the payload, its caller name shown only as its length ([`shown_voip`],
//! [`shown_alert`]).

use async_trait::async_trait;
use chrono::Utc;
use serde_json::Value;

use super::{AlertPush, Notice, PushError, PushSender, VoipPush};
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

/// A caller name as a log line may show it: its length (`""` stays `""`).
fn length_of(name: &mut Value) {
    if let Some(text) = name.as_str().filter(|t| !t.is_empty()) {
        *name = Value::String(format!("<{} chars>", text.chars().count()));
    }
}

/// The VoIP push's payload as the log line shows it: `callerName` as its length.
pub fn shown_voip(push: &VoipPush) -> String {
    let mut payload = serde_json::to_value(push).expect("the payload serializes");
    if let Some(name) = payload.get_mut("callerName") {
        length_of(name);
    }
    payload.to_string()
}

/// The missed-call notice's payload as the log line shows it: the caller name in `loc-args` as
/// its length.
pub fn shown_alert(push: &AlertPush) -> String {
    let mut payload = serde_json::to_value(push).expect("the payload serializes");
    if let Some(Value::Array(args)) = payload.pointer_mut("/aps/alert/loc-args") {
        args.iter_mut().for_each(length_of);
    }
    payload.to_string()
}

#[async_trait]
impl PushSender for LogPushSender {
    async fn send(&self, push: &VoipPush, device: &Device) -> Result<(), PushError> {
        // No token, no caller name, no device id: the call id, when, where it would go, and
        // the payload with the caller name's length.
        tracing::info!(
            callId = push.call_id.as_str(),
            sentAt = rfc3339_millis(Utc::now()),
            device = device.device_id.log_hash(&self.salt),
            environment = device.environment.as_str(),
            payload = shown_voip(push),
            "{MESSAGE}"
        );
        Ok(())
    }

    async fn send_notice(&self, notice: Notice<'_>) -> Result<(), PushError> {
        // No token, no device id, no caller name: the call, why it ended, and the payload.
        tracing::info!(
            callId = notice.push.call_id.as_str(),
            reason = notice.push.reason,
            sentAt = rfc3339_millis(Utc::now()),
            payload = shown_alert(notice.push),
            "{ALERT_MESSAGE}"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use super::*;
    use crate::domain::device::DeviceId;
    use crate::domain::due::DueCall;
    use crate::domain::reservation::{CallId, ScheduledAt};

    fn call(caller_name: Option<&str>) -> DueCall {
        let at = DateTime::parse_from_rfc3339("2026-03-02T07:00:00+09:00").unwrap();
        DueCall {
            call_id: CallId::from_stored("3f9c0d2a7b1e4c5d8a6f0b9e2d4c7a1f".into()),
            device_id: DeviceId::from_stored("device-1".into()),
            scheduled_at: ScheduledAt::from_stored(at),
            due_at: at.to_utc(),
            caller_name: caller_name.map(str::to_owned),
        }
    }

    #[test]
    fn the_payloads_show_everything_but_the_caller_name_which_shows_its_length() {
        let push = VoipPush::for_call(&call(Some("ミカ・K")), Utc::now(), 2);
        let shown: Value = serde_json::from_str(&shown_voip(&push)).unwrap();
        let mut sent: Value = serde_json::from_str(&push.to_json()).unwrap();
        assert_eq!(sent["callerName"], "ミカ・K");
        sent["callerName"] = "<4 chars>".into();
        assert_eq!(shown, sent, "the payload, but the name");

        let alert = AlertPush::for_call(&call(Some("ミカ・K")), "missed");
        let shown: Value = serde_json::from_str(&shown_alert(&alert)).unwrap();
        let mut sent: Value = serde_json::from_str(&alert.to_json()).unwrap();
        assert_eq!(sent["aps"]["alert"]["loc-args"][0], "ミカ・K");
        sent["aps"]["alert"]["loc-args"][0] = "<4 chars>".into();
        assert_eq!(shown, sent);

        // No name: nothing to hide, the payload as sent.
        let json = |text: &str| serde_json::from_str::<Value>(text).unwrap();
        let push = VoipPush::for_call(&call(None), Utc::now(), 1);
        assert_eq!(json(&shown_voip(&push)), json(&push.to_json()));
        let alert = AlertPush::for_call(&call(None), "failed");
        assert_eq!(json(&shown_alert(&alert)), json(&alert.to_json()));
        assert_eq!(json(&alert.to_json())["aps"]["alert"]["loc-args"][0], "");
    }
}
