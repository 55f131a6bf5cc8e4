//! PUT /devices over HTTP against the real local server (in-memory store, manual clock).

use std::sync::Arc;

use chrono::{Duration, Utc};
use koe::domain::device::PushEnvironment;
use koe::platform::clock::Clock;
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{
    FailingStore, TestApp, error_body, error_message, invalid_field, send, send_with_secret,
    spawn_app_with,
};
use serde_json::{Value, json};

const NOW: &str = "2026-03-01T00:00:00Z";
const NOW_MILLIS: &str = "2026-03-01T00:00:00.000Z";
const DEVICE: &str = "6F9619FF-8B86-D011-B42D-00C04FC964FF";

fn token() -> String {
    format!("ab{}", "cdef0123".repeat(8))
}

async fn app_at_now() -> (TestApp, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let app = spawn_app_with(&[], |app| app.with_clock(clock.clone())).await;
    (app, clock)
}

async fn put_raw(app: &TestApp, body: impl Into<reqwest::Body>) -> reqwest::Response {
    send(app.agent(http::Method::PUT, "/devices").body(body)).await
}

async fn put(app: &TestApp, body: &Value) -> reqwest::Response {
    put_raw(app, body.to_string()).await
}

// ---------------------------------------------------------------------------------------------
// Success

#[tokio::test]
async fn put_registers_the_device_and_answers_without_the_token() {
    let (app, _clock) = app_at_now().await;
    let response = put(&app, &json!({"deviceId": DEVICE, "voipToken": token()})).await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let text = response.text().await.unwrap();
    assert!(
        !text.contains(&token()),
        "the token is never returned: {text}"
    );
    assert!(!text.contains("cdef0123"), "no part of the token: {text}");
    let mut body: Value = serde_json::from_str(&text).unwrap();
    // A new device gets its secret (64 hex digits), once.
    let secret = body
        .as_object_mut()
        .unwrap()
        .remove("deviceSecret")
        .expect("a new device gets its secret");
    let secret = secret.as_str().unwrap();
    assert_eq!(secret.len(), 64);
    assert!(secret.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(
        body,
        json!({"deviceId": DEVICE, "environment": "production", "updatedAt": NOW_MILLIS, "confirmsCalls": false})
    );

    let stored = app.stored_device(DEVICE).await.unwrap();
    assert_eq!(stored.voip_token.expose(), token());
    assert_eq!(stored.environment, PushEnvironment::Production);
    assert_eq!(stored.updated_at, app.clock.now());
    assert!(app.events.published().is_empty());
}

#[tokio::test]
async fn environment_sandbox_and_explicit_production_are_kept() {
    let (app, _clock) = app_at_now().await;
    for (device, environment) in [("dev-sandbox", "sandbox"), ("dev-production", "production")] {
        let response = put(
            &app,
            &json!({"deviceId": device, "voipToken": token(), "environment": environment}),
        )
        .await;
        assert_eq!(response.status().as_u16(), 200, "{environment}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["environment"], environment);
        let stored = app.stored_device(device).await.unwrap();
        assert_eq!(stored.environment.as_str(), environment);
    }
}

#[tokio::test]
async fn null_environment_means_production_and_unknown_fields_are_ignored() {
    let (app, _clock) = app_at_now().await;
    let response = put(
        &app,
        &json!({"deviceId": DEVICE, "voipToken": token(), "environment": null, "extra": [1, 2]}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["environment"], "production");
    assert!(body.get("extra").is_none());
}

#[tokio::test]
async fn an_uppercase_hex_token_is_accepted_and_stored_lowercase() {
    let (app, _clock) = app_at_now().await;
    let upper = token().to_uppercase();
    let response = put(&app, &json!({"deviceId": DEVICE, "voipToken": upper})).await;
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    assert!(!text.to_lowercase().contains(&token()), "{text}");
    let stored = app.stored_device(DEVICE).await.unwrap();
    assert_eq!(stored.voip_token.expose(), token());
}

#[tokio::test]
async fn tokens_of_64_and_200_hex_digits_are_accepted() {
    let (app, _clock) = app_at_now().await;
    for (device, len) in [("dev-64", 64), ("dev-200", 200)] {
        let hex = "0123456789abcdef".repeat(13)[..len].to_owned();
        let response = put(&app, &json!({"deviceId": device, "voipToken": hex})).await;
        assert_eq!(response.status().as_u16(), 200, "{len} digits");
        let stored = app.stored_device(device).await.unwrap();
        assert_eq!(stored.voip_token.expose(), hex);
    }
}

#[tokio::test]
async fn device_ids_of_every_allowed_character_and_128_chars_are_accepted() {
    let (app, _clock) = app_at_now().await;
    for device in ["a", "AZaz09-_.:", &"d".repeat(128)] {
        let response = put(&app, &json!({"deviceId": device, "voipToken": token()})).await;
        assert_eq!(response.status().as_u16(), 200, "{device}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["deviceId"], device);
    }
}

#[tokio::test]
async fn a_second_put_replaces_token_environment_and_time() {
    let (app, clock) = app_at_now().await;
    let first = put(&app, &json!({"deviceId": DEVICE, "voipToken": token()})).await;
    assert_eq!(first.status().as_u16(), 200);

    clock.advance(Duration::seconds(90));
    let new_token = "ef".repeat(40);
    let second = put(
        &app,
        &json!({"deviceId": DEVICE, "voipToken": new_token, "environment": "sandbox"}),
    )
    .await;
    assert_eq!(second.status().as_u16(), 200);
    let mut body: Value = second.json().await.unwrap();
    let secret = body.as_object_mut().unwrap().remove("deviceSecret");
    assert!(
        secret.is_some(),
        "the first secret was not proven: a new one"
    );
    assert_eq!(
        body,
        json!({"deviceId": DEVICE, "environment": "sandbox", "updatedAt": "2026-03-01T00:01:30.000Z", "confirmsCalls": false})
    );
    let stored = app.stored_device(DEVICE).await.unwrap();
    assert_eq!(stored.voip_token.expose(), new_token);
    assert_eq!(stored.environment, PushEnvironment::Sandbox);
    assert_eq!(stored.updated_at, clock.now());
}

#[tokio::test]
async fn the_alert_token_is_stored_never_answered_and_replaced_by_each_put() {
    let (app, _clock) = app_at_now().await;
    let alert = "9A".repeat(40);
    let body = json!({"deviceId": DEVICE, "voipToken": token(), "alertToken": alert});
    let response = put(&app, &body).await;
    assert_eq!(response.status().as_u16(), 200);
    let mut answered: Value = response.json().await.unwrap();
    let secret = answered.as_object_mut().unwrap().remove("deviceSecret");
    assert_eq!(
        answered,
        json!({"deviceId": DEVICE, "environment": "production", "updatedAt": NOW_MILLIS, "confirmsCalls": false}),
        "the alert token is never answered"
    );
    let stored = app.stored_device(DEVICE).await.unwrap();
    assert_eq!(stored.alert_token.unwrap().expose(), "9a".repeat(40));

    let secret = secret.unwrap();
    let again = json!({"deviceId": DEVICE, "voipToken": token(), "alertToken": null});
    let request = app
        .agent(http::Method::PUT, "/devices")
        .body(again.to_string());
    let response = send_with_secret(request, secret.as_str()).await;
    assert_eq!(response.status().as_u16(), 200);
    let stored = app.stored_device(DEVICE).await.unwrap();
    assert_eq!(stored.alert_token, None, "a PUT without it removes it");
}

// ---------------------------------------------------------------------------------------------
// 400: every class names its field

#[tokio::test]
async fn each_invalid_body_is_a_400_naming_its_field() {
    let (app, _clock) = app_at_now().await;
    let t = token();
    let whole_bodies = [
        ("malformed JSON", r#"{"deviceId": "#.to_owned()),
        ("empty body", String::new()),
        ("whitespace body", "  \n ".to_owned()),
        ("array", "[1, 2]".to_owned()),
        ("string", r#""device""#.to_owned()),
        ("null", "null".to_owned()),
    ];
    // A valid body with one field set to the value (`None`: left out); the 400 names that field.
    let one_field_wrong: Vec<(&str, &str, Option<Value>)> = vec![
        ("deviceId", "missing", None),
        ("deviceId", "null", Some(Value::Null)),
        ("deviceId", "empty", Some(json!(""))),
        ("deviceId", "with a space", Some(json!("my phone"))),
        ("deviceId", "with a slash", Some(json!("a/b"))),
        ("deviceId", "non-ASCII", Some(json!("デバイス"))),
        ("deviceId", "129 chars", Some(json!("d".repeat(129)))),
        ("deviceId", "a number", Some(json!(42))),
        ("deviceId", "an object", Some(json!({"id": "x"}))),
        ("voipToken", "missing", None),
        ("voipToken", "empty", Some(json!(""))),
        ("voipToken", "63 chars", Some(json!("a".repeat(63)))),
        ("voipToken", "201 chars", Some(json!("a".repeat(201)))),
        ("voipToken", "non-hex", Some(json!("g".repeat(64)))),
        (
            "voipToken",
            "with spaces",
            Some(json!(format!("<{}>", "ab ".repeat(30)))),
        ),
        ("voipToken", "a number", Some(json!(1234))),
        ("voipToken", "an array", Some(json!([t]))),
        ("alertToken", "63 chars", Some(json!("a".repeat(63)))),
        ("alertToken", "non-hex", Some(json!("g".repeat(64)))),
        ("alertToken", "a number", Some(json!(1234))),
        ("environment", "staging", Some(json!("staging"))),
        ("environment", "uppercase", Some(json!("Sandbox"))),
        ("environment", "a number", Some(json!(1))),
        ("environment", "a boolean", Some(json!(true))),
    ];
    let mut cases: Vec<(String, String, &str)> = whole_bodies
        .into_iter()
        .map(|(case, body)| (case.to_owned(), body, "body"))
        .collect();
    for (field, what, value) in one_field_wrong {
        let mut body = json!({"deviceId": DEVICE, "voipToken": t});
        match value {
            Some(value) => body[field] = value,
            None => drop(body.as_object_mut().unwrap().remove(field)),
        }
        cases.push((format!("{field} {what}"), body.to_string(), field));
    }
    for (case, body, field) in cases {
        let response = put_raw(&app, body).await;
        assert_eq!(response.status().as_u16(), 400, "{case}");
        let body = invalid_field(response, field).await;
        let message = body["message"].as_str().unwrap();
        assert!(
            !message.contains(&t),
            "{case}: the message never quotes the token"
        );
    }
    assert!(
        app.stored_device(DEVICE).await.is_none(),
        "nothing was stored"
    );
    assert!(app.events.published().is_empty(), "a 400 is not notified");
}

#[tokio::test]
async fn a_body_over_8_kib_is_a_400_naming_the_body() {
    let (app, _clock) = app_at_now().await;
    let padding = "x".repeat(8 * 1024);
    let body = json!({"deviceId": DEVICE, "voipToken": token(), "pad": padding});
    let response = put(&app, &body).await;
    let body = invalid_field(response, "body").await;
    assert!(body["message"].as_str().unwrap().contains("8192"), "{body}");
    assert!(app.stored_device(DEVICE).await.is_none());
}

#[tokio::test]
async fn a_body_of_exactly_8_kib_is_accepted() {
    let (app, _clock) = app_at_now().await;
    let base = json!({"deviceId": DEVICE, "voipToken": token(), "pad": ""}).to_string();
    let padding = "x".repeat(8 * 1024 - base.len());
    let body = json!({"deviceId": DEVICE, "voipToken": token(), "pad": padding}).to_string();
    assert_eq!(body.len(), 8 * 1024);
    let response = put_raw(&app, body).await;
    assert_eq!(response.status().as_u16(), 200);
}

// ---------------------------------------------------------------------------------------------
// 503

#[tokio::test]
async fn a_failing_store_is_a_503_with_an_error_notification() {
    let app = spawn_app_with(&[], |app| app.with_store(Arc::new(FailingStore))).await;
    let response = put(&app, &json!({"deviceId": DEVICE, "voipToken": token()})).await;
    let request_id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let text_check = error_body(response, 503, "SERVICE_UNAVAILABLE").await;
    assert!(!text_check.to_string().contains(&token()));

    let published = app.events.published();
    assert_eq!(published.len(), 1, "one notification: {published:?}");
    let n = &published[0];
    assert_eq!(n.code, "SERVICE_UNAVAILABLE");
    assert_eq!(n.status, 503);
    assert_eq!(n.route, "PUT /devices");
    assert_eq!(n.function, "put-device");
    assert_eq!(n.request_id, request_id);
    assert!(
        (Utc::now() - n.time).num_seconds().abs() < 60,
        "system clock time"
    );
}

#[tokio::test]
async fn validation_comes_before_the_store() {
    let app = spawn_app_with(&[], |app| app.with_store(Arc::new(FailingStore))).await;
    let response = put(&app, &json!({"deviceId": DEVICE, "voipToken": "xyz"})).await;
    invalid_field(response, "voipToken").await;
    assert!(app.events.published().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Device secret (docs/security.md, "Device-scoped access")

async fn put_with_secret(app: &TestApp, secret: Option<&str>, body: &Value) -> reqwest::Response {
    send_with_secret(
        app.agent(http::Method::PUT, "/devices")
            .body(body.to_string()),
        secret,
    )
    .await
}

#[tokio::test]
async fn once_the_app_has_presented_its_secret_the_token_cannot_be_replaced_without_it() {
    let (app, _clock) = app_at_now().await;
    let body = json!({"deviceId": DEVICE, "voipToken": token()});
    let first: Value = put(&app, &body).await.json().await.unwrap();
    let first = first["deviceSecret"].as_str().unwrap().to_owned();

    // Without a secret while unproven (today's app, or one never given it): the token replaced,
    // and a new secret answered in place of the unproven one.
    let again = put(&app, &body).await;
    assert_eq!(again.status().as_u16(), 200);
    let again: Value = again.json().await.unwrap();
    let secret = again["deviceSecret"].as_str().unwrap().to_owned();
    assert_ne!(secret, first);

    // Someone else's guess is refused, and so is the replaced secret.
    let other = format!("{}0", &secret[1..]);
    for wrong in [other, first] {
        let refused = put_with_secret(&app, Some(&wrong), &body).await;
        error_body(refused, 403, "DEVICE_SECRET_REQUIRED").await;
    }

    // The app presents it: written, and from now on required.
    let proven = put_with_secret(&app, Some(&secret), &body).await;
    assert_eq!(proven.status().as_u16(), 200);
    let attacker = json!({"deviceId": DEVICE, "voipToken": format!("ff{}", "00112233".repeat(8))});
    let refused = put(&app, &attacker).await;
    let message = error_message(refused, 403, "DEVICE_SECRET_REQUIRED").await;
    assert!(message.contains("X-Device-Secret"), "{message}");
    let stored = app.stored_device(DEVICE).await.unwrap();
    assert_eq!(
        stored.voip_token.expose(),
        token(),
        "the token was not replaced"
    );
    let ok = put_with_secret(&app, Some(&secret), &attacker).await;
    assert_eq!(ok.status().as_u16(), 200);

    // A malformed header names itself.
    let long = "a".repeat(129);
    let bad = put_with_secret(&app, Some(&long), &body).await;
    invalid_field(bad, "X-Device-Secret").await;
}
