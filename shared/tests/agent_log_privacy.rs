//! No personal data in the logs of the agent API: devices and call reservations run with sentinel
//! values in every place personal data goes (VoIP token, device id, API keys, caller name) while a
//! trace-level capture of everything the process logs (our crates and dependencies, the AWS SDK
//! included) is scanned. Device ids may appear only as their salted hash: a positive control
//! finds that hash, proving the capture sees the handlers' lines.
//!
//! Its own test binary, so the capture sees only this binary's runs.

use std::sync::Arc;

use koe::domain::device::DeviceId;
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{FailingStore, TestApp, send, spawn_app_with};
use koe_testkit::logs::{self, LogCapture};
use serde_json::{Value, json};

/// A recognizable 66-digit VoIP token.
fn token() -> String {
    format!("ab{}", "cdef0123".repeat(8))
}
const DEVICE: &str = "SENTINEL-DEVICE-5b7e";
const API_KEY: &str = "SENTINEL-APIKEY-0c9d";
const WRONG_KEY: &str = "SENTINEL-WRONGKEY-77aa";
const CALLER: &str = "SENTINEL-CALLER-31f0";
const SALT: &str = "test-salt";
const PROBE: &str = "SENTINEL-PROBE";

/// In 2035: DynamoDB Local deletes items whose TTL passed by the wall clock, whenever it likes
/// (docs/testing.md), and a record gone between two requests turns a 409 into a 201.
const NOW: &str = "2035-03-01T00:00:00Z";
const AT: &str = "2035-03-01T09:00:30+09:00";

/// Every sentinel, and the distinctive parts a partial or re-cased leak would show.
fn forbidden() -> Vec<String> {
    vec![
        token(),
        token().to_uppercase(),
        "cdef0123cdef0123".to_owned(),
        "CDEF0123CDEF0123".to_owned(),
        DEVICE.to_owned(),
        "DEVICE-5b7e".to_owned(),
        API_KEY.to_owned(),
        "APIKEY-0c9d".to_owned(),
        WRONG_KEY.to_owned(),
        "WRONGKEY-77aa".to_owned(),
        CALLER.to_owned(),
        "CALLER-31f0".to_owned(),
    ]
}

fn vars() -> Vec<(&'static str, &'static str)> {
    vec![("AGENT_API_KEYS", API_KEY), ("DEVICE_HASH_SALT", SALT)]
}

fn hash(device: &str) -> String {
    DeviceId::parse("deviceId", device).unwrap().log_hash(SALT)
}

async fn request(
    app: &TestApp,
    method: http::Method,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> (u16, String) {
    let mut builder = app.agent_with_key(method, path, key);
    if let Some(body) = body {
        builder = builder.body(body.to_string());
    }
    let response = send(builder).await;
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// Every agent endpoint, succeeding and failing, with the sentinels in play; asserts the
/// statuses and that no answer echoes the token or the key.
async fn exercise(app: &TestApp, device: &str) {
    let query = format!("/calls?deviceId={device}");
    let put = json!({"deviceId": device, "voipToken": token().to_uppercase()});
    let calls: Vec<(http::Method, &str, &str, Option<Value>, u16)> = vec![
        // Wrong key, with the token in the body.
        (
            http::Method::PUT,
            "/devices",
            WRONG_KEY,
            Some(put.clone()),
            401,
        ),
        (http::Method::GET, &query, WRONG_KEY, None, 401),
        // Register (uppercase token, stored lowercase), then invalid registrations.
        (
            http::Method::PUT,
            "/devices",
            API_KEY,
            Some(put.clone()),
            200,
        ),
        (
            http::Method::PUT,
            "/devices",
            API_KEY,
            Some(json!({"deviceId": device, "voipToken": format!("{}zz", token())})),
            400,
        ),
        (
            http::Method::PUT,
            "/devices",
            API_KEY,
            Some(json!({"deviceId": device, "voipToken": token(), "environment": "staging"})),
            400,
        ),
        (
            http::Method::PUT,
            "/devices",
            API_KEY,
            Some(json!({"deviceId": format!("{device} x"), "voipToken": token()})),
            400,
        ),
        // Reserve, conflict, invalid, read, cancel.
        (
            http::Method::POST,
            "/calls",
            API_KEY,
            Some(json!({"deviceId": device, "scheduledAt": AT, "callerName": CALLER})),
            201,
        ),
        (
            http::Method::POST,
            "/calls",
            API_KEY,
            Some(json!({"deviceId": device, "scheduledAt": AT, "callerName": CALLER})),
            409,
        ),
        (
            http::Method::POST,
            "/calls",
            API_KEY,
            Some(json!({"deviceId": device, "scheduledAt": AT, "callerName": CALLER.repeat(5)})),
            400,
        ),
        (http::Method::GET, &query, API_KEY, None, 200),
        (http::Method::DELETE, &query, API_KEY, None, 204),
        (http::Method::GET, &query, API_KEY, None, 404),
        (http::Method::DELETE, &query, API_KEY, None, 404),
    ];
    for (method, path, key, body, expected) in calls {
        let case = format!("{method} {path} → {expected}");
        let (status, text) = request(app, method, path, key, body).await;
        assert_eq!(status, expected, "{case}: {text}");
        assert!(!text.contains(&token()), "{case}: {text}");
        assert!(!text.contains("CDEF0123CDEF0123"), "{case}: {text}");
        assert!(
            !text.contains(API_KEY) && !text.contains(WRONG_KEY),
            "{case}: {text}"
        );
    }
}

fn assert_handler_lines(capture: &LogCapture, device: &str) {
    for message in [
        "device registered",
        "reservation created",
        "reservation cancelled",
    ] {
        capture.assert_line(
            &format!("a {message:?} line with the hashed device"),
            &[("message", json!(message)), ("device", json!(hash(device)))],
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devices_and_calls_log_no_tokens_device_ids_keys_or_names() {
    let capture = logs::capture();
    tracing::info!(probe = PROBE, "capture check");
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let app = spawn_app_with(&vars(), |app| app.with_clock(clock.clone())).await;

    exercise(&app, DEVICE).await;

    capture.assert_line("the probe line", &[("probe", json!(PROBE))]);
    assert_handler_lines(&capture, DEVICE);
    capture.assert_refusal_logged("/devices", 401, "UNAUTHORIZED");
    capture.assert_line(
        "the access log line of the cancel",
        &[("route", json!("/calls")), ("status", json!(204))],
    );
    capture.assert_none_of(forbidden());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_failures_log_no_tokens_or_device_ids() {
    let capture = logs::capture();
    let app = spawn_app_with(&vars(), |app| app.with_store(Arc::new(FailingStore))).await;
    let query = format!("/calls?deviceId={DEVICE}");
    let in_a_minute = (chrono::Utc::now() + chrono::Duration::minutes(1)).to_rfc3339();
    let calls = [
        (
            http::Method::PUT,
            "/devices",
            Some(json!({"deviceId": DEVICE, "voipToken": token()})),
        ),
        (
            http::Method::POST,
            "/calls",
            Some(json!({"deviceId": DEVICE, "scheduledAt": in_a_minute, "callerName": CALLER})),
        ),
        (http::Method::GET, query.as_str(), None),
        (http::Method::DELETE, query.as_str(), None),
    ];
    for (method, path, body) in calls {
        let (status, text) = request(&app, method.clone(), path, API_KEY, body).await;
        assert_eq!(status, 503, "{method} {path}: {text}");
    }
    assert_eq!(app.events.published().len(), 4);
    capture.assert_refusal_logged("/devices", 503, "SERVICE_UNAVAILABLE");
    capture.assert_none_of(forbidden());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dynamodb_store_logs_no_tokens_device_ids_or_names() {
    let capture = logs::capture();
    let app = koe_testkit::harness::spawn_app_on_dynamodb(&vars(), NOW).await;
    // Its own sentinel device (same distinctive suffix), so its lines are told apart.
    let device = "SENTINEL-DEVICE-5b7e-ddb";
    exercise(&app, device).await;
    assert_handler_lines(&capture, device);
    capture.assert_none_of(forbidden());
}
