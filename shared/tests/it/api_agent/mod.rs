//! POST /agent over HTTP against the real local server, with a stand-in OpenAI on loopback and a
//! manual clock: both rounds end to end, structured output checked and retried once, every class
//! of bad input. The daily limit has its own file (`agent_limit.rs`). Here: the shared app,
//! bodies and model answers; one file per stage or concern beside it.

mod model_output;
mod plan_binding;
mod round_1;
mod round_2;
mod size_caps;
mod validation;

use std::sync::Arc;

use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{TestApp, error_body, issued_step_id, send, spawn_app_with};
use koe_testkit::openai::Behaviour;
use serde_json::{Value, json};

/// The app's clock: Sunday 2026-03-01, 09:00 in Tokyo.
pub(super) const NOW: &str = "2026-03-01T00:00:00Z";
pub(super) const DEVICE: &str = "6F9619FF-8B86-D011-B42D-00C04FC964FF";

pub(super) async fn app_with(vars: &[(&str, &str)]) -> TestApp {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    spawn_app_with(vars, |app| app.with_clock(clock)).await
}

pub(super) async fn app() -> TestApp {
    app_with(&[]).await
}

pub(super) async fn post(app: &TestApp, body: impl Into<reqwest::Body>) -> reqwest::Response {
    send(app.agent(http::Method::POST, "/agent").body(body)).await
}

pub(super) fn round_1(message: &str) -> Value {
    json!({"message": message, "capabilities": ["calendar"], "deviceId": DEVICE})
}

pub(super) fn now() -> chrono::DateTime<chrono::Utc> {
    NOW.parse().unwrap()
}

/// A step id of a fresh plan of [`DEVICE`], as round 1 issues it at [`NOW`].
pub(super) fn step_id() -> String {
    issued_step_id(DEVICE, now())
}

pub(super) fn round_2() -> Value {
    json!({
        "message": "明日の予定を教えて",
        "deviceId": DEVICE,
        "results": [{"stepId": step_id(), "tool": "calendar", "output": {"events": [
            {"title": "歯医者", "start": "2026-03-02T10:00:00+09:00", "end": "2026-03-02T11:00:00+09:00"},
            {"title": "実家", "start": "2026-03-02T00:00:00+09:00", "end": "2026-03-03T00:00:00+09:00", "allDay": true},
        ]}}],
    })
}

/// What the planner model writes for a one-step calendar plan over `from`..`to`.
pub(super) fn plan_output(ranges: &[(&str, &str)]) -> Behaviour {
    let steps: Vec<Value> = ranges
        .iter()
        .map(|(from, to)| json!({"tool": "calendar", "args": {"from": from, "to": to}}))
        .collect();
    Behaviour::complete(json!({"decision": {"type": "plan", "steps": steps}}).to_string())
}

pub(super) fn tomorrow_plan() -> Behaviour {
    plan_output(&[("2026-03-02T00:00:00+09:00", "2026-03-03T00:00:00+09:00")])
}

pub(super) fn planner_answer(reply: &str, emotion: &str) -> Behaviour {
    Behaviour::agent_answer(reply, emotion)
}

pub(super) fn responder_answer(reply: &str, emotion: &str) -> Behaviour {
    Behaviour::complete(json!({"reply": reply, "emotion": emotion}).to_string())
}

pub(super) async fn ok_body(response: reqwest::Response) -> Value {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    body
}

/// The provider request's system prompt and its JSON schema.
pub(super) fn system_and_schema(request: &Value) -> (String, Value) {
    let format = &request["response_format"];
    assert_eq!(format["type"], "json_schema", "{format}");
    assert_eq!(format["json_schema"]["strict"], true, "{format}");
    assert_eq!(request["messages"][0]["role"], "system");
    (
        request["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_owned(),
        format["json_schema"]["schema"].clone(),
    )
}

/// Asserts one error notification for POST /agent with `code`.
pub(super) fn assert_one_notification(app: &TestApp, code: &str) {
    let published = app.events.published();
    assert_eq!(published.len(), 1, "{published:?}");
    assert_eq!(published[0].code, code);
    assert_eq!(published[0].route, "POST /agent");
    assert_eq!(published[0].function, "agent");
}

/// `body` POSTed fails with 500 `PROVIDER_BAD_RESPONSE` after the model was asked twice (its
/// invalid output asked once more), with one notification.
pub(super) async fn assert_bad_output_twice(app: &TestApp, body: &Value) {
    error_body(
        post(app, body.to_string()).await,
        500,
        "PROVIDER_BAD_RESPONSE",
    )
    .await;
    assert_eq!(app.openai.request_count(), 2);
    assert_one_notification(app, "PROVIDER_BAD_RESPONSE");
}

pub(super) fn with(mut body: Value, field: &str, value: Value) -> Value {
    body[field] = value;
    body
}
