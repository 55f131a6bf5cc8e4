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
use koe::domain::reservation::{CallId, Reservation, RunToken};
use koe::store::Outcome;
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{TestApp, send, spawn_app_with};
use serde_json::{Value, json};

/// The app's clock: 2026-03-01T09:00:00 in Tokyo.
pub(super) const NOW: &str = "2026-03-01T00:00:00Z";
pub(super) const NOW_MILLIS: &str = "2026-03-01T00:00:00.000Z";
/// 30 s ahead of `NOW`, written in JST.
pub(super) const AT: &str = "2026-03-01T09:00:30+09:00";

/// The ways a call ends: a device for each, the outcome, and the status GET /calls then answers.
pub(super) const ENDED: [(&str, Outcome, &str); 3] = [
    ("dev-sent", Outcome::Sent, "sent"),
    ("dev-failed", Outcome::Failed, "failed"),
    ("dev-missed", Outcome::Missed, "missed"),
];

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

/// The app at `NOW` with `device` registered and its call at `AT` created: the app, its clock
/// and the created call's body.
pub(super) async fn app_with_a_call(device: &str) -> (TestApp, Arc<ManualClock>, Value) {
    let (app, clock) = app_at_now().await;
    register(&app, device).await;
    let created = create(&app, device, AT).await;
    (app, clock, created)
}

/// `device` registered, its call at `AT` created and taken to `outcome`: the created body.
pub(super) async fn ended_call(app: &TestApp, device: &str, outcome: Outcome) -> Value {
    register(app, device).await;
    let created = create(app, device, AT).await;
    finish(app, device, &created, outcome).await;
    created
}

/// `device`'s reservation as the store holds it at `NOW`.
pub(super) async fn stored(app: &TestApp, device: &str) -> Option<Reservation> {
    let id = device_id(device);
    app.store.get_reservation(&id, now()).await.unwrap()
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

/// A store request on `reservation` of `device`, made by hand as a run would (a new run token,
/// at the app's time, a claim abandoned after 30 s).
struct ByHand {
    device: DeviceId,
    call: CallId,
    run: RunToken,
    now: DateTime<Utc>,
    abandoned_before: DateTime<Utc>,
}

impl ByHand {
    fn new(app: &TestApp, device: &str, reservation: &Value) -> ByHand {
        let now = app.clock.now();
        ByHand {
            device: device_id(device),
            call: call_id(reservation),
            run: RunToken::generate(),
            now,
            abandoned_before: now - Duration::seconds(30),
        }
    }
}

/// `scheduled` → `claimed`, as the dispatcher does.
pub(super) async fn claim(app: &TestApp, device: &str, reservation: &Value) {
    let r = ByHand::new(app, device, reservation);
    let claim = app
        .store
        .claim_reservation(&r.device, &r.call, &r.run, r.now, r.abandoned_before);
    assert!(claim.await.unwrap(), "claimed {device}");
}

/// Takes the reservation to `outcome` through the store (claiming it first for sent/failed).
pub(super) async fn finish(app: &TestApp, device: &str, reservation: &Value, outcome: Outcome) {
    if outcome != Outcome::Missed {
        claim(app, device, reservation).await;
    }
    let r = ByHand::new(app, device, reservation);
    let (run, now) = (&r.run, r.now);
    let finish =
        app.store
            .finish_reservation(&r.device, &r.call, outcome, run, now, r.abandoned_before);
    assert!(finish.await.unwrap(), "{device} → {outcome:?}");
}
