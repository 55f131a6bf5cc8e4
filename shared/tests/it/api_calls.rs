//! POST, GET and DELETE /calls over HTTP against the real local server, with a manual clock.
//! States past `scheduled` are driven through the store the server uses, as the dispatcher would.
//! The core flow also runs against DynamoDB Local (testkit's `dynamodb::fresh_store`).

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use koe::clock::Clock;
use koe::domain::device::DeviceId;
use koe::domain::reservation::{CallId, ReservationStatus, RunToken};
use koe::store::Outcome;
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{
    FailingStore, TestApp, error_body, invalid_field, send, send_with_secret, spawn_app_with,
};
use serde_json::{Value, json};

/// The app's clock: 2026-03-01T09:00:00 in Tokyo.
pub(super) const NOW: &str = "2026-03-01T00:00:00Z";
const NOW_MILLIS: &str = "2026-03-01T00:00:00.000Z";
/// 30 s ahead of `NOW`, written in JST.
pub(super) const AT: &str = "2026-03-01T09:00:30+09:00";

pub(super) fn token() -> String {
    format!("ab{}", "cdef0123".repeat(8))
}

fn now() -> DateTime<Utc> {
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
async fn create(app: &TestApp, device: &str, at: &str) -> Value {
    let response = post_raw(app, &json!({"deviceId": device, "scheduledAt": at})).await;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 201, "POST /calls {device} {at}: {body}");
    body
}

fn encode(device: &str) -> String {
    form_urlencoded::byte_serialize(device.as_bytes()).collect()
}

async fn get(app: &TestApp, device: &str) -> reqwest::Response {
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

fn call_id(body: &Value) -> CallId {
    CallId::from_stored(body["callId"].as_str().expect("callId").to_owned())
}

/// `scheduled` → `claimed`, as the dispatcher does.
async fn claim(app: &TestApp, device: &str, reservation: &Value) {
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
async fn finish(app: &TestApp, device: &str, reservation: &Value, outcome: Outcome) {
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

fn keys(body: &Value) -> BTreeSet<&str> {
    body.as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// POST

#[tokio::test]
async fn post_creates_a_scheduled_reservation_keeping_the_clients_offset() {
    let (app, _clock) = app_at_now().await;
    register(&app, "dev-1").await;
    let response = post_raw(
        &app,
        &json!({"deviceId": "dev-1", "scheduledAt": AT, "callerName": "ミク"}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 201);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        keys(&body),
        BTreeSet::from([
            "callId",
            "deviceId",
            "scheduledAt",
            "status",
            "createdAt",
            "updatedAt",
            "callerName",
            "pushes"
        ]),
        "{body}"
    );
    assert_eq!(body["pushes"], 0, "{body}");
    assert!(
        body["callId"].as_str().is_some_and(|id| !id.is_empty()),
        "{body}"
    );
    assert_eq!(body["deviceId"], "dev-1");
    assert_eq!(body["scheduledAt"], AT);
    assert_eq!(body["status"], "scheduled");
    assert_eq!(body["createdAt"], NOW_MILLIS);
    assert_eq!(body["updatedAt"], NOW_MILLIS);
    assert_eq!(body["callerName"], "ミク");

    let stored = app
        .store
        .get_reservation(&device_id("dev-1"), now())
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(stored.call_id.as_str(), body["callId"]);
    assert_eq!(stored.status, ReservationStatus::Scheduled);
    assert_eq!(stored.scheduled_at.utc(), now() + Duration::seconds(30));
    assert!(app.events.published().is_empty());
}

#[tokio::test]
async fn post_keeps_other_offsets_and_fractions_and_omits_an_absent_caller_name() {
    let (app, _clock) = app_at_now().await;
    for (device, at) in [
        ("dev-utc", "2026-03-01T00:05:00Z"),
        ("dev-ny", "2026-02-28T19:05:00-05:00"),
        ("dev-frac", "2026-03-01T09:05:00.250+09:00"),
    ] {
        register(&app, device).await;
        let body = create(&app, device, at).await;
        assert_eq!(body["scheduledAt"], at, "{device}");
        assert!(body.get("callerName").is_none(), "{body}");
    }
}

#[tokio::test]
async fn post_without_a_registered_device_is_409_device_not_registered() {
    let (app, _clock) = app_at_now().await;
    let response = post_raw(&app, &json!({"deviceId": "dev-unknown", "scheduledAt": AT})).await;
    error_body(response, 409, "DEVICE_NOT_REGISTERED").await;
    assert!(
        app.store
            .get_reservation(&device_id("dev-unknown"), now())
            .await
            .unwrap()
            .is_none()
    );
    assert!(app.events.published().is_empty(), "a 409 is not notified");
}

#[tokio::test]
async fn a_second_post_while_scheduled_is_409_reservation_exists_and_keeps_the_first() {
    let (app, _clock) = app_at_now().await;
    register(&app, "dev-1").await;
    let first = create(&app, "dev-1", AT).await;
    let response = post_raw(
        &app,
        &json!({"deviceId": "dev-1", "scheduledAt": "2026-03-01T10:00:00+09:00"}),
    )
    .await;
    error_body(response, 409, "RESERVATION_EXISTS").await;
    let current = get_ok(&app, "dev-1").await;
    assert_eq!(current, first, "the first reservation is untouched");
}

#[tokio::test]
async fn a_post_while_claimed_is_409_reservation_exists() {
    let (app, _clock) = app_at_now().await;
    register(&app, "dev-1").await;
    let first = create(&app, "dev-1", AT).await;
    claim(&app, "dev-1", &first).await;
    let response = post_raw(
        &app,
        &json!({"deviceId": "dev-1", "scheduledAt": "2026-03-01T10:00:00+09:00"}),
    )
    .await;
    error_body(response, 409, "RESERVATION_EXISTS").await;
    assert_eq!(get_ok(&app, "dev-1").await["status"], "claimed");
}

#[tokio::test]
async fn after_sent_failed_or_missed_a_new_post_creates_a_new_reservation() {
    let (app, _clock) = app_at_now().await;
    for (device, outcome, status) in [
        ("dev-sent", Outcome::Sent, "sent"),
        ("dev-failed", Outcome::Failed, "failed"),
        ("dev-missed", Outcome::Missed, "missed"),
    ] {
        register(&app, device).await;
        let first = create(&app, device, AT).await;
        finish(&app, device, &first, outcome).await;
        assert_eq!(get_ok(&app, device).await["status"], status);

        let second = create(&app, device, "2026-03-01T10:00:00+09:00").await;
        assert_ne!(second["callId"], first["callId"], "{device}: a new callId");
        assert_eq!(second["status"], "scheduled");
        let current = get_ok(&app, device).await;
        assert_eq!(
            current, second,
            "{device}: the new one replaced the old one"
        );
    }
}

#[tokio::test]
async fn a_scheduled_reservation_long_past_its_time_no_longer_blocks_a_new_post() {
    let (app, clock) = app_at_now().await;
    register(&app, "dev-1").await;
    let first = create(&app, "dev-1", AT).await;
    // Past its time + grace (120 s) + claim timeout (30 s): it can never be sent now.
    clock.advance(Duration::seconds(30 + 151));
    let second = create(&app, "dev-1", "2026-03-01T10:00:00+09:00").await;
    assert_ne!(second["callId"], first["callId"]);
    assert_eq!(get_ok(&app, "dev-1").await, second);
}

#[tokio::test]
async fn scheduled_at_must_be_10_seconds_to_30_days_ahead_with_an_offset() {
    let (app, _clock) = app_at_now().await;
    let cases: Vec<(&str, Value, bool)> = vec![
        ("9 s ahead", json!("2026-03-01T09:00:09+09:00"), false),
        ("10 s ahead", json!("2026-03-01T09:00:10+09:00"), true),
        ("30 days ahead", json!("2026-03-31T00:00:00Z"), true),
        ("30 days + 1 s ahead", json!("2026-03-31T00:00:01Z"), false),
        ("now", json!(NOW), false),
        ("in the past", json!("2026-02-28T23:59:00Z"), false),
        ("a year ahead", json!("2027-03-01T00:00:00Z"), false),
        ("without offset", json!("2026-03-01T09:00:30"), false),
        ("date only", json!("2026-03-02"), false),
        ("not a date", json!("tomorrow at nine"), false),
        ("empty", json!(""), false),
        ("a number", json!(1772323230), false),
        ("an object", json!({"at": AT}), false),
        ("null", Value::Null, false),
    ];
    for (i, (case, at, ok)) in cases.into_iter().enumerate() {
        let device = format!("dev-{i}");
        register(&app, &device).await;
        let response = post_raw(&app, &json!({"deviceId": device, "scheduledAt": at})).await;
        if ok {
            assert_eq!(response.status().as_u16(), 201, "{case}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["scheduledAt"], at, "{case}");
        } else {
            assert_eq!(response.status().as_u16(), 400, "{case}");
            invalid_field(response, "scheduledAt").await;
        }
    }
    let response = post_raw(&app, &json!({"deviceId": "dev-0"})).await;
    invalid_field(response, "scheduledAt").await;
}

#[tokio::test]
async fn caller_name_is_1_to_64_characters() {
    let (app, _clock) = app_at_now().await;
    let cases: Vec<(&str, Value, bool)> = vec![
        ("64 ASCII chars", json!("n".repeat(64)), true),
        ("64 Japanese chars", json!("あ".repeat(64)), true),
        ("null", Value::Null, true),
        ("65 chars", json!("n".repeat(65)), false),
        ("65 Japanese chars", json!("あ".repeat(65)), false),
        ("empty", json!(""), false),
        ("a number", json!(7), false),
        ("an array", json!(["Koe"]), false),
    ];
    for (i, (case, name, ok)) in cases.into_iter().enumerate() {
        let device = format!("dev-{i}");
        register(&app, &device).await;
        let response = post_raw(
            &app,
            &json!({"deviceId": device, "scheduledAt": AT, "callerName": name}),
        )
        .await;
        if ok {
            assert_eq!(response.status().as_u16(), 201, "{case}");
            let body: Value = response.json().await.unwrap();
            if name.is_null() {
                assert!(body.get("callerName").is_none(), "{case}: {body}");
            } else {
                assert_eq!(body["callerName"], name, "{case}");
            }
        } else {
            assert_eq!(response.status().as_u16(), 400, "{case}");
            invalid_field(response, "callerName").await;
        }
    }
}

#[tokio::test]
async fn post_bodies_that_are_not_a_reservation_are_400_naming_the_field() {
    let (app, _clock) = app_at_now().await;
    register(&app, "dev-1").await;
    let cases: Vec<(&str, String, &str)> = vec![
        ("malformed JSON", "{".to_owned(), "body"),
        ("empty body", String::new(), "body"),
        ("array", "[]".to_owned(), "body"),
        (
            "deviceId missing",
            json!({"scheduledAt": AT}).to_string(),
            "deviceId",
        ),
        (
            "deviceId bad chars",
            json!({"deviceId": "a b", "scheduledAt": AT}).to_string(),
            "deviceId",
        ),
        (
            "deviceId a number",
            json!({"deviceId": 1, "scheduledAt": AT}).to_string(),
            "deviceId",
        ),
        (
            "over 8 KiB",
            json!({"deviceId": "dev-1", "scheduledAt": AT, "pad": "x".repeat(8 * 1024)})
                .to_string(),
            "body",
        ),
    ];
    for (case, body, field) in cases {
        let response = send(app.agent(http::Method::POST, "/calls").body(body)).await;
        assert_eq!(response.status().as_u16(), 400, "{case}");
        invalid_field(response, field).await;
    }
    let response = get(&app, "dev-1").await;
    error_body(response, 404, "NOT_FOUND").await;
}

// ---------------------------------------------------------------------------------------------
// GET

#[tokio::test]
async fn get_answers_the_reservation_in_each_state() {
    let (app, clock) = app_at_now().await;
    register(&app, "dev-1").await;
    let created = create(&app, "dev-1", AT).await;

    let scheduled = get_ok(&app, "dev-1").await;
    assert_eq!(scheduled, created);
    assert_eq!(scheduled["status"], "scheduled");

    clock.advance(Duration::seconds(30));
    claim(&app, "dev-1", &created).await;
    let claimed = get_ok(&app, "dev-1").await;
    assert_eq!(claimed["status"], "claimed");
    assert_eq!(claimed["callId"], created["callId"]);
    assert_eq!(claimed["scheduledAt"], AT);
    assert_eq!(claimed["createdAt"], NOW_MILLIS);
    assert_eq!(claimed["updatedAt"], "2026-03-01T00:00:30.000Z");

    clock.advance(Duration::seconds(1));
    let now = clock.now();
    let done = app
        .store
        .finish_reservation(
            &device_id("dev-1"),
            &call_id(&created),
            Outcome::Sent,
            &RunToken::generate(),
            now,
            now - Duration::seconds(30),
        )
        .await
        .unwrap();
    assert!(done);
    let sent = get_ok(&app, "dev-1").await;
    assert_eq!(sent["status"], "sent");
    assert_eq!(sent["callId"], created["callId"]);
    assert_eq!(sent["updatedAt"], "2026-03-01T00:00:31.000Z");
}

#[tokio::test]
async fn get_answers_failed_and_missed_too() {
    let (app, _clock) = app_at_now().await;
    for (device, outcome, status) in [
        ("dev-failed", Outcome::Failed, "failed"),
        ("dev-missed", Outcome::Missed, "missed"),
    ] {
        register(&app, device).await;
        let created = create(&app, device, AT).await;
        finish(&app, device, &created, outcome).await;
        let body = get_ok(&app, device).await;
        assert_eq!(body["status"], status);
        assert_eq!(body["callId"], created["callId"]);
    }
}

#[tokio::test]
async fn get_without_a_reservation_is_404_not_found() {
    let (app, _clock) = app_at_now().await;
    error_body(get(&app, "dev-unknown").await, 404, "NOT_FOUND").await;
    register(&app, "dev-registered").await;
    error_body(get(&app, "dev-registered").await, 404, "NOT_FOUND").await;
    assert!(app.events.published().is_empty());
}

#[tokio::test]
async fn get_and_delete_need_a_valid_device_id_in_the_query() {
    let (app, _clock) = app_at_now().await;
    let long = "d".repeat(129);
    let paths = [
        "/calls".to_owned(),
        "/calls?".to_owned(),
        "/calls?deviceId=".to_owned(),
        "/calls?deviceid=dev-1".to_owned(),
        "/calls?other=dev-1".to_owned(),
        "/calls?deviceId=a%20b".to_owned(),
        "/calls?deviceId=a%2Fb".to_owned(),
        "/calls?deviceId=%E3%81%82".to_owned(),
        format!("/calls?deviceId={long}"),
    ];
    for method in [http::Method::GET, http::Method::DELETE] {
        for path in &paths {
            let response = send(app.agent(method.clone(), path)).await;
            assert_eq!(response.status().as_u16(), 400, "{method} {path}");
            invalid_field(response, "deviceId").await;
        }
    }
}

#[tokio::test]
async fn a_percent_encoded_device_id_works_on_get_and_delete() {
    let (app, _clock) = app_at_now().await;
    let device = "urn:uuid:6F9619FF-8B86-D011";
    register(&app, device).await;
    let created = create(&app, device, AT).await;
    assert_eq!(created["deviceId"], device);

    let path = "/calls?deviceId=urn%3Auuid%3A6F9619FF-8B86-D011";
    let response = send(app.agent(http::Method::GET, path)).await;
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body, created);

    // Unencoded ':' is fine in a query too.
    let body = get_ok(&app, device).await;
    assert_eq!(body["deviceId"], device);
    let response = send(app.agent(http::Method::GET, &format!("/calls?deviceId={device}"))).await;
    assert_eq!(response.status().as_u16(), 200);

    let response = send(app.agent(http::Method::DELETE, path)).await;
    assert_eq!(response.status().as_u16(), 204);
    error_body(get(&app, device).await, 404, "NOT_FOUND").await;
}

#[tokio::test]
async fn other_query_parameters_are_ignored() {
    let (app, _clock) = app_at_now().await;
    register(&app, "dev-1").await;
    let created = create(&app, "dev-1", AT).await;
    let response = send(app.agent(http::Method::GET, "/calls?x=1&deviceId=dev-1&y=2")).await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.json::<Value>().await.unwrap(), created);
}

// ---------------------------------------------------------------------------------------------
// DELETE

#[tokio::test]
async fn delete_cancels_then_get_and_delete_are_404() {
    let (app, _clock) = app_at_now().await;
    register(&app, "dev-1").await;
    create(&app, "dev-1", AT).await;

    let response = delete(&app, "dev-1").await;
    assert_eq!(response.status().as_u16(), 204);
    let bytes = response.bytes().await.unwrap();
    assert!(bytes.is_empty(), "204 has no body: {bytes:?}");

    error_body(get(&app, "dev-1").await, 404, "NOT_FOUND").await;
    error_body(delete(&app, "dev-1").await, 404, "NOT_FOUND").await;
    assert!(
        app.store
            .get_reservation(&device_id("dev-1"), now())
            .await
            .unwrap()
            .is_none()
    );

    // The slot is free again.
    let again = create(&app, "dev-1", AT).await;
    assert_eq!(again["status"], "scheduled");
}

#[tokio::test]
async fn delete_without_any_reservation_is_404() {
    let (app, _clock) = app_at_now().await;
    error_body(delete(&app, "dev-unknown").await, 404, "NOT_FOUND").await;
}

#[tokio::test]
async fn delete_after_claim_is_409_too_late_and_the_reservation_stays() {
    let (app, _clock) = app_at_now().await;
    register(&app, "dev-1").await;
    let created = create(&app, "dev-1", AT).await;
    claim(&app, "dev-1", &created).await;

    let response = delete(&app, "dev-1").await;
    let body = error_body(response, 409, "TOO_LATE").await;
    assert!(
        body["message"].as_str().unwrap().contains("claimed"),
        "{body}"
    );

    let current = get_ok(&app, "dev-1").await;
    assert_eq!(current["status"], "claimed");
    assert_eq!(current["callId"], created["callId"]);
    assert!(app.events.published().is_empty(), "a 409 is not notified");
}

#[tokio::test]
async fn delete_after_sent_is_409_too_late() {
    let (app, _clock) = app_at_now().await;
    register(&app, "dev-1").await;
    let created = create(&app, "dev-1", AT).await;
    finish(&app, "dev-1", &created, Outcome::Sent).await;
    error_body(delete(&app, "dev-1").await, 409, "TOO_LATE").await;
    assert_eq!(get_ok(&app, "dev-1").await["status"], "sent");
}

// ---------------------------------------------------------------------------------------------
// 503

#[tokio::test]
async fn a_failing_store_is_a_503_with_a_notification_on_post_get_and_delete() {
    let app = spawn_app_with(&[], |app| app.with_store(Arc::new(FailingStore))).await;
    let in_a_minute = (Utc::now() + Duration::minutes(1)).to_rfc3339();
    let requests = [
        (
            app.agent(http::Method::POST, "/calls")
                .body(json!({"deviceId": "dev-1", "scheduledAt": in_a_minute}).to_string()),
            "POST /calls",
            "create-call",
        ),
        (
            app.agent(http::Method::GET, "/calls?deviceId=dev-1"),
            "GET /calls",
            "get-call",
        ),
        (
            app.agent(http::Method::DELETE, "/calls?deviceId=dev-1"),
            "DELETE /calls",
            "cancel-call",
        ),
    ];
    for (i, (request, route, function)) in requests.into_iter().enumerate() {
        let response = send(request).await;
        let request_id = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_owned();
        error_body(response, 503, "SERVICE_UNAVAILABLE").await;
        let published = app.events.published();
        assert_eq!(published.len(), i + 1, "{route}: one notification each");
        let n = &published[i];
        assert_eq!(n.code, "SERVICE_UNAVAILABLE", "{route}");
        assert_eq!(n.status, 503, "{route}");
        assert_eq!(n.route, route);
        assert_eq!(n.function, function, "{route}");
        assert_eq!(n.request_id, request_id, "{route}");
    }
}

#[tokio::test]
async fn validation_comes_before_the_store() {
    let app = spawn_app_with(&[], |app| app.with_store(Arc::new(FailingStore))).await;
    let response = post_raw(&app, &json!({"deviceId": "dev-1", "scheduledAt": "soon"})).await;
    invalid_field(response, "scheduledAt").await;
    let response = send(app.agent(http::Method::GET, "/calls")).await;
    invalid_field(response, "deviceId").await;
    assert!(app.events.published().is_empty());
}

// ---------------------------------------------------------------------------------------------
// DynamoDB Local

#[tokio::test]
async fn the_core_flow_works_on_dynamodb_local() {
    let store = Arc::new(koe_testkit::dynamodb::fresh_store().await);
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let app = spawn_app_with(&[], |app| app.with_clock(clock.clone()).with_store(store)).await;
    let device = format!("ddb:{:016x}", fastrand::u64(..));

    // Not registered yet.
    let response = post_raw(&app, &json!({"deviceId": device, "scheduledAt": AT})).await;
    error_body(response, 409, "DEVICE_NOT_REGISTERED").await;
    error_body(get(&app, &device).await, 404, "NOT_FOUND").await;

    register(&app, &device).await;
    let stored = app.stored_device(&device).await.unwrap();
    assert_eq!(stored.voip_token.expose(), token());

    let response = post_raw(
        &app,
        &json!({"deviceId": device, "scheduledAt": AT, "callerName": "ミク"}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 201);
    let created: Value = response.json().await.unwrap();
    assert_eq!(created["scheduledAt"], AT);
    assert_eq!(created["status"], "scheduled");
    assert_eq!(created["createdAt"], NOW_MILLIS);
    assert_eq!(created["callerName"], "ミク");

    assert_eq!(get_ok(&app, &device).await, created, "round-trips DynamoDB");

    let response = post_raw(
        &app,
        &json!({"deviceId": device, "scheduledAt": "2026-03-01T10:00:00+09:00"}),
    )
    .await;
    error_body(response, 409, "RESERVATION_EXISTS").await;

    let response = delete(&app, &device).await;
    assert_eq!(response.status().as_u16(), 204);
    assert!(response.bytes().await.unwrap().is_empty());
    error_body(get(&app, &device).await, 404, "NOT_FOUND").await;
    error_body(delete(&app, &device).await, 404, "NOT_FOUND").await;

    // A new one, claimed: too late to cancel.
    let second = create(&app, &device, AT).await;
    assert_ne!(second["callId"], created["callId"]);
    claim(&app, &device, &second).await;
    error_body(delete(&app, &device).await, 409, "TOO_LATE").await;
    assert_eq!(get_ok(&app, &device).await["status"], "claimed");
    assert!(app.events.published().is_empty(), "no 5xx on the way");
}

// ---------------------------------------------------------------------------------------------
// Device secret (docs/security.md, "Device-scoped access"): /calls holds a proven device to it too.

async fn calls_with_secret(
    app: &TestApp,
    method: http::Method,
    device: &str,
    secret: Option<&str>,
) -> reqwest::Response {
    send_with_secret(
        if method == http::Method::POST {
            app.agent(method, "/calls").body(
                json!({"deviceId": device, "scheduledAt": AT, "callerName": "Mika"}).to_string(),
            )
        } else {
            app.agent(method, &format!("/calls?deviceId={}", encode(device)))
        },
        secret,
    )
    .await
}

#[tokio::test]
async fn once_the_device_secret_is_proven_calls_need_it_and_before_they_do_not() {
    let (app, _clock) = app_at_now().await;
    let device = "calls-secret-device";
    let secret = app.register_device(device, &token()).await;
    let other = format!("{}0", &secret[1..]);

    // Not proven yet (today's app): no header needed, but a wrong one is refused.
    let wrong = calls_with_secret(&app, http::Method::POST, device, Some(&other)).await;
    error_body(wrong, 403, "DEVICE_SECRET_REQUIRED").await;
    let created = calls_with_secret(&app, http::Method::POST, device, None).await;
    assert_eq!(created.status().as_u16(), 201);
    let created: Value = created.json().await.unwrap();
    assert_eq!(
        calls_with_secret(&app, http::Method::GET, device, None)
            .await
            .status()
            .as_u16(),
        200
    );

    // The app proves it on PUT /devices: from now on /calls needs it.
    app.put_device(device, &token(), Some(&secret)).await;
    for method in [http::Method::GET, http::Method::DELETE, http::Method::POST] {
        for presented in [None, Some(other.as_str())] {
            let refused = calls_with_secret(&app, method.clone(), device, presented).await;
            error_body(refused, 403, "DEVICE_SECRET_REQUIRED").await;
        }
    }
    // Nothing was cancelled or replaced by the refused requests.
    let kept = get_ok_with(&app, device, &secret).await;
    assert_eq!(kept["status"], "scheduled");
    assert_eq!(kept["callId"], created["callId"]);

    let cancelled = calls_with_secret(&app, http::Method::DELETE, device, Some(&secret)).await;
    assert_eq!(cancelled.status().as_u16(), 204);
    let again = calls_with_secret(&app, http::Method::POST, device, Some(&secret)).await;
    assert_eq!(again.status().as_u16(), 201);

    // A malformed header names itself.
    let bad = calls_with_secret(&app, http::Method::GET, device, Some(&"a".repeat(129))).await;
    invalid_field(bad, "X-Device-Secret").await;
}

/// APNs called the token dead (the dispatcher removes it): the device keeps its proven secret,
/// so nobody can register a new token for it, nor read or cancel its reservation, without it.
#[tokio::test]
async fn a_device_whose_token_was_removed_still_needs_its_proven_secret() {
    let (app, _clock) = app_at_now().await;
    let device = "calls-secret-dead-token";
    let secret = app.register_proven_device(device, &token()).await;
    let stored = app.stored_device(device).await.unwrap();
    assert!(
        app.store
            .remove_device(&device_id(device), &stored.voip_token)
            .await
            .unwrap()
    );

    let takeover = json!({"deviceId": device, "voipToken": format!("ef{}", "01234567".repeat(8))});
    let refused = send(
        app.agent(http::Method::PUT, "/devices")
            .body(takeover.to_string()),
    )
    .await;
    error_body(refused, 403, "DEVICE_SECRET_REQUIRED").await;
    for method in [http::Method::GET, http::Method::DELETE, http::Method::POST] {
        let refused = calls_with_secret(&app, method, device, None).await;
        error_body(refused, 403, "DEVICE_SECRET_REQUIRED").await;
    }
    // With the secret: no token to call, so no reservation; a new token restores it.
    let unregistered = calls_with_secret(&app, http::Method::POST, device, Some(&secret)).await;
    error_body(unregistered, 409, "DEVICE_NOT_REGISTERED").await;
    let again = send(
        app.agent(http::Method::PUT, "/devices")
            .header("x-device-secret", &secret)
            .body(takeover.to_string()),
    )
    .await;
    assert_eq!(again.status().as_u16(), 200);
    let created = calls_with_secret(&app, http::Method::POST, device, Some(&secret)).await;
    assert_eq!(created.status().as_u16(), 201);
}

async fn get_ok_with(app: &TestApp, device: &str, secret: &str) -> Value {
    let response = calls_with_secret(app, http::Method::GET, device, Some(secret)).await;
    assert_eq!(response.status().as_u16(), 200);
    response.json().await.unwrap()
}
