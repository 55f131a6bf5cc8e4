//! POST, GET and DELETE /calls over HTTP against the real local server, with a manual clock.
//! States past `scheduled` are driven through the store the server uses, as the dispatcher would.
//! The core flow also runs against DynamoDB Local (testkit's `dynamodb::fresh_store`). Here: the
//! shared app, requests and store moves; one file per verb or concern beside it.

mod capacity;
mod delete;
mod device_secret;
mod get;
mod post;
mod stores;

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use koe::domain::device::DeviceId;
use koe::domain::reservation::{CallId, RunToken};
use koe::store::Outcome;
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{TestApp, send, spawn_app_with};
use serde_json::{Value, json};

/// The app's clock: 2026-03-01T09:00:00 in Tokyo.
pub(super) const NOW: &str = "2026-03-01T00:00:00Z";
pub(super) const NOW_MILLIS: &str = "2026-03-01T00:00:00.000Z";
/// 30 s ahead of `NOW`, written in JST.
pub(super) const AT: &str = "2026-03-01T09:00:30+09:00";

pub(super) fn token() -> String {
    format!("ab{}", "cdef0123".repeat(8))
}

pub(super) fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(NOW)
        .unwrap()
        .with_timezone(&Utc)
}

pub(super) async fn app_at_now() -> (TestApp, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let app = spawn_app_with(&[], |app| app.with_clock(clock.clone())).await;
    (app, clock)
}

pub(super) async fn register(app: &TestApp, device: &str) {
    let response = send(
        app.agent(http::Method::PUT, "/devices")
            .body(json!({"deviceId": device, "voipToken": token()}).to_string()),
    )
    .await;
    assert_eq!(response.status().as_u16(), 200, "PUT /devices {device}");
}

pub(super) async fn post_raw(app: &TestApp, body: &Value) -> reqwest::Response {
    send(
        app.agent(http::Method::POST, "/calls")
            .body(body.to_string()),
    )
    .await
}

/// POSTs a reservation and asserts the 201; returns its body.
pub(super) async fn create(app: &TestApp, device: &str, at: &str) -> Value {
    let response = post_raw(app, &json!({"deviceId": device, "scheduledAt": at})).await;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 201, "POST /calls {device} {at}: {body}");
    body
}

pub(super) fn encode(device: &str) -> String {
    form_urlencoded::byte_serialize(device.as_bytes()).collect()
}

pub(super) async fn get(app: &TestApp, device: &str) -> reqwest::Response {
    send(app.agent(
        http::Method::GET,
        &format!("/calls?deviceId={}", encode(device)),
    ))
    .await
}

pub(super) async fn delete(app: &TestApp, device: &str) -> reqwest::Response {
    send(app.agent(
        http::Method::DELETE,
        &format!("/calls?deviceId={}", encode(device)),
    ))
    .await
}

/// GETs the reservation, asserting the 200; returns its body.
pub(super) async fn get_ok(app: &TestApp, device: &str) -> Value {
    let response = get(app, device).await;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "GET /calls {device}: {body}");
    body
}

pub(super) fn device_id(raw: &str) -> DeviceId {
    DeviceId::parse("deviceId", raw).unwrap()
}

pub(super) fn call_id(body: &Value) -> CallId {
    CallId::from_stored(body["callId"].as_str().expect("callId").to_owned())
}

/// `scheduled` → `claimed`, as the dispatcher does.
pub(super) async fn claim(app: &TestApp, device: &str, reservation: &Value) {
    let now = app.clock.now();
    let won = app
        .store
        .claim_reservation(
            &device_id(device),
            &call_id(reservation),
            &RunToken::generate(),
            now,
            now - Duration::seconds(30),
        )
        .await
        .unwrap();
    assert!(won, "claimed {device}");
}

/// Takes the reservation to `outcome` through the store (claiming it first for sent/failed).
pub(super) async fn finish(app: &TestApp, device: &str, reservation: &Value, outcome: Outcome) {
    if outcome != Outcome::Missed {
        claim(app, device, reservation).await;
    }
    let now = app.clock.now();
    let done = app
        .store
        .finish_reservation(
            &device_id(device),
            &call_id(reservation),
            outcome,
            &RunToken::generate(),
            now,
            now - Duration::seconds(30),
        )
        .await
        .unwrap();
    assert!(done, "{device} → {outcome:?}");
}
