//! docs/app.md's push payloads: the two pushes a call can make, built by the code that sends them
//! (`koe::push`) for one example call, and how the logging sender's line shows them.

use chrono::DateTime;
use koe::domain::device::DeviceId;
use koe::domain::due::DueCall;
use koe::domain::reservation::{CallId, ScheduledAt};
use koe::push::log::shown_voip;
use koe::push::{AlertPush, VoipPush};

use super::code;

pub(super) fn payloads() -> String {
    let at = DateTime::parse_from_rfc3339("2026-03-02T07:00:00+09:00").expect("a time");
    let call = DueCall {
        call_id: CallId::from_stored("3f9c0d2a7b1e4c5d8a6f0b9e2d4c7a1f".into()),
        device_id: DeviceId::from_stored("example".into()),
        scheduled_at: ScheduledAt::from_stored(at),
        due_at: at.to_utc(),
        caller_name: Some("こえ".into()),
    };
    let voip = VoipPush::for_call(&call, at.to_utc(), 1);
    let alert = AlertPush::for_call(&call, "missed");
    let shown: serde_json::Value = serde_json::from_str(&shown_voip(&voip)).expect("JSON");
    format!(
        "The call push (`callerName` if set), then the notice; koe-local logs them, the name as \
         {}:\n\n```json\n{}\n{}\n```\n",
        code(&shown["callerName"].to_string()),
        voip.to_json(),
        alert.to_json(),
    )
}
