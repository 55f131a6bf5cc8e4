//! The flows of confirming a call, run on each store (memory, DynamoDB Local).

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use koe::platform::clock::Clock;
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{TestApp, error_body, invalid_field, spawn_app_with};
use serde_json::{Value, json};

use crate::api_calls::{get_ok, token};

use super::{
    NOW, app_at_now, at, confirm, confirm_ok, confirm_raw, push_leaves, pushed, put_device,
    register_confirming, reserve,
};

fn millis(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The `Confirmed` records the app wrote, as (ConfirmLatency, Function).
fn confirmed_records(app: &TestApp) -> Vec<(i64, String)> {
    app.metric_lines()
        .iter()
        .filter(|line| line.get("Confirmed").is_some())
        .map(|line| {
            assert_eq!(line["Confirmed"], 1, "{line}");
            assert_eq!(
                line["_aws"]["CloudWatchMetrics"][0]["Namespace"],
                "Koe/Dispatch"
            );
            let latency = line["ConfirmLatency"].as_i64().expect("ConfirmLatency");
            (latency, line["Function"].as_str().unwrap().to_owned())
        })
        .collect()
}

async fn confirms_calls_round_trips_on_put_devices(app: &TestApp, _: &ManualClock) {
    let device = "confirm-flag";
    let base = json!({"deviceId": device, "voipToken": token()});
    for (flag, shown) in [
        (json!(true), true),
        (json!(false), false),
        (Value::Null, false),
    ] {
        let mut body = base.clone();
        if !flag.is_null() {
            body["confirmsCalls"] = flag.clone();
        }
        let response = put_device(app, body).await;
        assert_eq!(response.status().as_u16(), 200);
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["confirmsCalls"], shown, "{flag}: {answer}");
    }
    let mut bad = base.clone();
    bad["confirmsCalls"] = json!("yes");
    invalid_field(put_device(app, bad).await, "confirmsCalls").await;
}

async fn a_confirmed_call_is_rang_and_a_repeat_answers_the_same(
    app: &TestApp,
    clock: &ManualClock,
) {
    let device = "confirm-rang";
    register_confirming(app, device).await;
    let call = reserve(app, device).await;
    pushed(app, clock, device, &call).await;
    assert_eq!(
        get_ok(app, device).await["status"],
        "sent",
        "waiting for its next push"
    );
    clock.advance(Duration::milliseconds(1_250));
    let confirmed_at = clock.now();

    let body = confirm_ok(app, device, &call).await;
    assert_eq!(body["status"], "rang", "{body}");
    assert_eq!(body["rangAt"], millis(confirmed_at), "{body}");
    assert_eq!(body["pushes"], 1, "{body}");
    assert_eq!(body["callId"], call.as_str());
    assert_eq!(body, get_ok(app, device).await, "the body GET /calls shows");

    // Made again (its answer lost): the same body, counted once.
    clock.advance(Duration::seconds(3));
    assert_eq!(confirm_ok(app, device, &call).await, body);
    assert_eq!(
        confirmed_records(app),
        vec![(1_250, "confirm-call".to_owned())],
        "one Confirmed, the latency from the reserved second"
    );
    assert!(app.events.published().is_empty(), "no 5xx on the way");
}

async fn a_confirmation_before_the_first_outcome_counts(app: &TestApp, clock: &ManualClock) {
    let device = "confirm-early";
    register_confirming(app, device).await;
    let call = reserve(app, device).await;
    clock.set(at());
    push_leaves(app, device, &call).await;
    clock.advance(Duration::milliseconds(300));
    let body = confirm_ok(app, device, &call).await;
    assert_eq!(body["status"], "rang", "{body}");
    assert_eq!(body["rangAt"], millis(clock.now()), "{body}");
    assert_eq!(body["pushes"], 1, "its push counted: {body}");
}

async fn calls_that_are_not_the_devices_pushed_call_are_404(app: &TestApp, clock: &ManualClock) {
    let (device, other) = ("confirm-404", "confirm-404-other");
    register_confirming(app, device).await;
    register_confirming(app, other).await;
    let call = reserve(app, device).await;
    let not_found = "deviceId has no reservation with this callId whose push has left";
    // Not pushed yet.
    let body = error_body(confirm(app, device, &call).await, 404, "NOT_FOUND").await;
    assert_eq!(body["message"], not_found);
    pushed(app, clock, device, &call).await;
    // Another device's call, an unknown callId, a device never registered.
    error_body(confirm(app, other, &call).await, 404, "NOT_FOUND").await;
    let unknown = format!("{:032x}", 0xc0ffee_u128);
    error_body(confirm(app, device, &unknown).await, 404, "NOT_FOUND").await;
    error_body(
        confirm(app, "confirm-nobody", &call).await,
        404,
        "NOT_FOUND",
    )
    .await;
    // None of them touched the call.
    assert_eq!(get_ok(app, device).await["status"], "sent");
    assert!(confirmed_records(app).is_empty());
}

async fn bad_bodies_are_400_naming_the_field(app: &TestApp, _: &ManualClock) {
    let call = format!("{:032x}", 0xabc_u128);
    for (body, field) in [
        (String::new(), "body"),
        ("[]".to_owned(), "body"),
        ("{\"deviceId\":".to_owned(), "body"),
        (json!({"callId": call}).to_string(), "deviceId"),
        (
            json!({"deviceId": "d", "callId": null}).to_string(),
            "callId",
        ),
        (
            json!({"deviceId": "d e", "callId": call}).to_string(),
            "deviceId",
        ),
        (
            json!({"deviceId": "d", "callId": "ABC"}).to_string(),
            "callId",
        ),
        (json!({"deviceId": "d", "callId": 7}).to_string(), "callId"),
        (
            json!({"deviceId": "d", "callId": call.to_uppercase()}).to_string(),
            "callId",
        ),
    ] {
        invalid_field(confirm_raw(app, &body, None).await, field).await;
    }
    // Unknown fields are ignored: judged as the call it names (none here).
    let extra = json!({"deviceId": "d", "callId": call, "attempt": 2}).to_string();
    error_body(confirm_raw(app, &extra, None).await, 404, "NOT_FOUND").await;
}

async fn a_proven_secret_is_required(app: &TestApp, clock: &ManualClock) {
    let device = "confirm-secret";
    let issued = register_confirming(app, device).await;
    let secret = issued["deviceSecret"].as_str().unwrap().to_owned();
    let other = format!("{}0", &secret[1..]);
    let call = reserve(app, device).await;
    pushed(app, clock, device, &call).await;
    let body = json!({"deviceId": device, "callId": call}).to_string();
    // Not proven yet: no header needed, but a wrong one is refused.
    let wrong = confirm_raw(app, &body, Some(&other)).await;
    error_body(wrong, 403, "DEVICE_SECRET_REQUIRED").await;
    // Presented here, it proves the device: from now on it is required.
    let confirmed = confirm_raw(app, &body, Some(&secret)).await;
    assert_eq!(
        confirmed.status().as_u16(),
        200,
        "proven by this confirmation"
    );
    for presented in [None, Some(other.as_str())] {
        let refused = confirm_raw(app, &body, presented).await;
        error_body(refused, 403, "DEVICE_SECRET_REQUIRED").await;
    }
    let malformed = confirm_raw(app, &body, Some(&"a".repeat(129))).await;
    invalid_field(malformed, "X-Device-Secret").await;
    let confirmed = confirm_raw(app, &body, Some(&secret)).await;
    assert_eq!(confirmed.status().as_u16(), 200, "with the proven secret");
}

macro_rules! on_both_stores {
    ($($flow:ident => $memory:ident, $dynamodb:ident;)+) => {$(
        #[tokio::test]
        async fn $memory() {
            let (app, clock) = app_at_now().await;
            $flow(&app, &clock).await;
        }

        #[tokio::test]
        async fn $dynamodb() {
            let (app, clock) = app_on_dynamodb_local().await;
            $flow(&app, &clock).await;
        }
    )+};
}

async fn app_on_dynamodb_local() -> (TestApp, Arc<ManualClock>) {
    let store = Arc::new(koe_testkit::dynamodb::fresh_store().await);
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let app = spawn_app_with(&[], |app| app.with_clock(clock.clone()).with_store(store)).await;
    (app, clock)
}

on_both_stores! {
    confirms_calls_round_trips_on_put_devices =>
        confirms_calls_round_trips_on_the_memory_store,
        confirms_calls_round_trips_on_dynamodb_local;
    a_confirmed_call_is_rang_and_a_repeat_answers_the_same =>
        a_confirmed_call_is_rang_on_the_memory_store,
        a_confirmed_call_is_rang_on_dynamodb_local;
    a_confirmation_before_the_first_outcome_counts =>
        an_early_confirmation_counts_on_the_memory_store,
        an_early_confirmation_counts_on_dynamodb_local;
    calls_that_are_not_the_devices_pushed_call_are_404 =>
        other_calls_are_404_on_the_memory_store,
        other_calls_are_404_on_dynamodb_local;
    bad_bodies_are_400_naming_the_field =>
        bad_bodies_are_400_on_the_memory_store,
        bad_bodies_are_400_on_dynamodb_local;
    a_proven_secret_is_required =>
        a_proven_secret_is_required_on_the_memory_store,
        a_proven_secret_is_required_on_dynamodb_local;
}
