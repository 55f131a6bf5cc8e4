//! The `PushSender` port: one VoIP push to one device (and its missed-call notice, an alert push).
//!
//! Adapters: APNs (`apns`, over `connection`, its answers classified in `classify`), and a sender that
//! only writes a log line (`log`), used by local runs and whenever APNs is not configured. The
//! dispatcher decides what to do with each kind of [`PushError`] (retry within the second's
//! budget, remove the token, give up); adapters only classify. [`pool::PushPool`] spreads pushes
//! over several connections of one adapter.

use async_trait::async_trait;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use crate::domain::device::{AlertToken, Device};
use crate::domain::due::DueCall;

pub mod apns;
pub mod classify;
pub mod connection;
pub mod log;
pub mod pool;
pub mod token;

/// How long APNs may hold a call's push for an offline device: a call that rings half a minute
/// late is still a call; one that rings minutes late is worse than none.
pub const CALL_PUSH_LIFETIME: chrono::Duration = chrono::Duration::seconds(30);

/// The VoIP push payload the app receives. Only what the incoming-call screen needs: the call's
/// id (so the app can drop a rare duplicate), the caller name to show, and the reserved time.
/// `aps` is empty: VoIP pushes are handed to the app (PushKit), never shown by the system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VoipPush {
    pub aps: Aps,
    pub call_id: String,
    /// Which push of the call this is: 1, then 2, 3 for a device that confirms its calls and
    /// had not confirmed the earlier one (the app drops a repeated `callId`).
    pub attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller_name: Option<String>,
    /// The reservation's `scheduledAt`, with the client's offset.
    pub scheduled_at: String,
    /// After this APNs discards the push if it could not deliver it (`apns-expiration`); not part
    /// of the payload.
    #[serde(skip)]
    pub expires_at: DateTime<Utc>,
    /// When the push must have left, if it must: a sender that cannot hand it to APNs by then
    /// (no connection or stream in time) gives it back unsent (`PushError::Retryable` without a
    /// status) rather than let its caller cut it off unsure whether it left.
    #[serde(skip)]
    pub leave_by: Option<tokio::time::Instant>,
    /// When a stream the server allows must have been found on the connection it was put on
    /// (the pool's hop, `push::pool::HOP`): one without a free stream by then gives the push back
    /// unsent, so the pool puts it on another. Only that wait is cut: not the connection's
    /// opening, nor its PING check.
    #[serde(skip)]
    pub stream_by: Option<tokio::time::Instant>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Aps {}

/// How long after a call's time its missed-call notice is still sent, and APNs may hold it for
/// an offline device (`apns-expiration`): a day later it no longer helps.
pub const NOTICE_LIFETIME: chrono::Duration = chrono::Duration::days(1);

/// The key of the notice's text in the app's `Localizable.strings` (docs/app.md).
pub const KOE_MISSED_CALL: &str = "KOE_MISSED_CALL";

/// The missed-call notice: a standard alert push (push type `alert`, topic the bundle id,
/// priority 10) the app's system shows, localized by the app (docs/dispatch.md, "Missed-call
/// notice").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AlertPush {
    pub aps: AlertAps,
    pub call_id: String,
    pub scheduled_at: String,
    /// How the call ended: `failed`, `missed` or `unconfirmed`.
    pub reason: &'static str,
    /// `apns-expiration`; not part of the payload.
    #[serde(skip)]
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AlertAps {
    pub alert: LocalizedAlert,
    pub sound: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocalizedAlert {
    #[serde(rename = "loc-key")]
    pub loc_key: &'static str,
    /// The caller name, or `""`.
    #[serde(rename = "loc-args")]
    pub loc_args: Vec<String>,
}

impl AlertPush {
    /// The notice of `call`, which ended `reason`.
    pub fn for_call(call: &DueCall, reason: &'static str) -> AlertPush {
        AlertPush {
            aps: AlertAps {
                alert: LocalizedAlert {
                    loc_key: KOE_MISSED_CALL,
                    loc_args: vec![call.caller_name.clone().unwrap_or_default()],
                },
                sound: "default",
            },
            call_id: call.call_id.as_str().to_owned(),
            scheduled_at: call
                .scheduled_at
                .with_offset()
                .to_rfc3339_opts(SecondsFormat::AutoSi, true),
            reason,
            expires_at: call.scheduled_at.utc() + NOTICE_LIFETIME,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("the payload serializes")
    }
}

impl VoipPush {
    /// The push `attempt` (1, 2, ...) for `reservation`, sent at `now`.
    pub fn for_call(reservation: &DueCall, now: DateTime<Utc>, attempt: u32) -> VoipPush {
        VoipPush {
            aps: Aps {},
            call_id: reservation.call_id.as_str().to_owned(),
            attempt,
            caller_name: reservation.caller_name.clone(),
            scheduled_at: reservation
                .scheduled_at
                .with_offset()
                .to_rfc3339_opts(SecondsFormat::AutoSi, true),
            expires_at: now + CALL_PUSH_LIFETIME,
            leave_by: None,
            stream_by: None,
        }
    }

    /// The push, to leave by `leave_by` ([`VoipPush::leave_by`]).
    pub fn leaving_by(self, leave_by: tokio::time::Instant) -> VoipPush {
        VoipPush {
            leave_by: Some(leave_by),
            ..self
        }
    }

    /// The push, to find a stream on its connection by `stream_by` ([`VoipPush::stream_by`]).
    pub fn finding_stream_by(self, stream_by: tokio::time::Instant) -> VoipPush {
        VoipPush {
            stream_by: Some(stream_by),
            ..self
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("the payload serializes")
    }
}

/// Why a push was not confirmed. Reasons name the APNs status and reason, never the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushError {
    /// APNs says the token is not (or no longer) valid (400 `BadDeviceToken`, 410
    /// `Unregistered`): the device's token is removed and the call fails.
    InvalidToken { status: u16, reason: String },
    /// Surely not delivered, and worth another attempt within the budget: APNs answered 429 or
    /// 5xx, did not process the request (HTTP/2 `REFUSED_STREAM`, or a stream above a GOAWAY's
    /// last stream id), or the request never left (no connection, or no stream the server
    /// allows, in time). Without a status: not sent.
    Retryable { status: Option<u16>, reason: String },
    /// The request may have reached APNs and been delivered, but no answer says so: the
    /// connection or stream broke after the request was handed to it, or no answer came in
    /// time. Never retried: a second push could ring the phone twice (docs/reliability.md,
    /// "Push retries"). The call is recorded `failed` as "push state unknown".
    MaybeDelivered { reason: String },
    /// Will fail again however often it is tried (another 4xx, a bad provider key, ...).
    Rejected { status: Option<u16>, reason: String },
}

impl PushError {
    pub fn status(&self) -> Option<u16> {
        match self {
            PushError::InvalidToken { status, .. } => Some(*status),
            PushError::Retryable { status, .. } | PushError::Rejected { status, .. } => *status,
            PushError::MaybeDelivered { .. } => None,
        }
    }

    pub fn reason(&self) -> &str {
        match self {
            PushError::InvalidToken { reason, .. }
            | PushError::Retryable { reason, .. }
            | PushError::MaybeDelivered { reason }
            | PushError::Rejected { reason, .. } => reason,
        }
    }
}

impl std::fmt::Display for PushError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status() {
            Some(status) => write!(f, "{status} {}", self.reason()),
            None => f.write_str(self.reason()),
        }
    }
}

/// A missed-call notice and where it goes: `push` to `device`'s alert token `token` (in the
/// device's environment).
#[derive(Debug, Clone, Copy)]
pub struct Notice<'a> {
    pub push: &'a AlertPush,
    pub device: &'a Device,
    pub token: &'a AlertToken,
}

#[async_trait]
pub trait PushSender: Send + Sync {
    /// Sends `push` to `device` (its token, in its environment). `Ok` means APNs accepted it.
    async fn send(&self, push: &VoipPush, device: &Device) -> Result<(), PushError>;

    /// Sends the missed-call notice (its push, to its device's alert token, in the device's
    /// environment) as an alert push. `Ok` means APNs accepted it. Senders that cannot send one
    /// refuse it.
    async fn send_notice(&self, _notice: Notice<'_>) -> Result<(), PushError> {
        Err(PushError::Rejected {
            status: None,
            reason: "this sender does not send alert pushes".into(),
        })
    }

    /// Opens the sender's connection ahead of its first push where the adapter can, so that push
    /// does not pay the connection's setup; returns once it is open. A no-op by default, and on
    /// a connection already open.
    async fn warm(&self) {}

    /// Gets ready for a second with `expected_in_second` pushes (a pool opens and warms enough
    /// connections). A no-op by default.
    async fn prepare(&self, _expected_in_second: usize) {}

    /// How many more pushes it can start at once now, where it knows: an APNs connection, the
    /// stream limit its server advertises less the streams open on it. `None` by default.
    fn headroom(&self) -> Option<usize> {
        None
    }
}

/// Stands in for an APNs client that could not be built: every push fails (and says why), so
/// calls are recorded `failed` instead of pretending to ring.
pub struct UnavailablePushSender;

#[async_trait]
impl PushSender for UnavailablePushSender {
    async fn send(&self, _: &VoipPush, _: &Device) -> Result<(), PushError> {
        Err(PushError::Rejected {
            status: None,
            reason: "the APNs client could not be built at start-up".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::device::DeviceId;
    use crate::domain::reservation::Reservation;
    use crate::domain::reservation::ScheduledAt;

    #[test]
    fn the_payload_is_an_empty_aps_and_the_call() {
        let now = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let at = ScheduledAt::parse("scheduledAt", "2026-01-01T09:00:30+09:00", now).unwrap();
        let device = DeviceId::parse("deviceId", "d1").unwrap();
        let mut reservation = Reservation::new(device, at, Some("こえ".into()), now);
        let push = VoipPush::for_call(&DueCall::from(&reservation), at.utc(), 2);
        let json: serde_json::Value = serde_json::from_str(&push.to_json()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "aps": {},
                "callId": reservation.call_id.as_str(),
                "attempt": 2,
                "callerName": "こえ",
                "scheduledAt": "2026-01-01T09:00:30+09:00",
            })
        );
        assert_eq!(push.expires_at, at.utc() + chrono::Duration::seconds(30));

        reservation.caller_name = None;
        let json: serde_json::Value = serde_json::from_str(
            &VoipPush::for_call(&DueCall::from(&reservation), now, 1).to_json(),
        )
        .unwrap();
        assert!(json.get("callerName").is_none(), "{json}");
        assert!(
            json.get("deviceId").is_none(),
            "no device id in the payload"
        );
    }
}
