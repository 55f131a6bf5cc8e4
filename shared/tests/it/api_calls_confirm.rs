//! POST /calls/confirm and `confirmsCalls` over HTTP against the real local server, with a manual
//! clock, on the memory store and on DynamoDB Local. Pushes are driven through the store the
//! server uses, as the dispatcher makes them (claim, push mark, outcome).

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use koe::clock::Clock;
use koe::domain::reservation::{CallId, RunToken};
use koe::store::{ClaimAnswer, Outcome};
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{
    TestApp, error_body, header, invalid_field, send, send_with_secret, spawn_app_with,
};
use serde_json::{Value, json};

use super::api_calls::{device_id, get_ok, post_raw, token};

/// The tests' time: in 2035, so that no TTL they write on DynamoDB Local has passed by the wall
/// clock (it deletes expired items at moments of its own: docs/testing.md).
const NOW: &str = "2035-03-01T00:00:00Z";
/// 30 s after [`NOW`], in JST.
const AT: &str = "2035-03-01T09:00:30+09:00";

async fn app_at_now() -> (TestApp, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let app = spawn_app_with(&[], |app| app.with_clock(clock.clone())).await;
    (app, clock)
}

/// How long the dispatcher waits for a confirmation before it pushes again (its default).
const WAIT: Duration = Duration::seconds(5);

async fn put_device(app: &TestApp, body: Value) -> reqwest::Response {
    send(
        app.agent(http::Method::PUT, "/devices")
            .body(body.to_string()),
    )
    .await
}

/// Registers `device` as an app that confirms its calls; the registration's answer.
async fn register_confirming(app: &TestApp, device: &str) -> Value {
    let body = json!({"deviceId": device, "voipToken": token(), "confirmsCalls": true});
    let response = put_device(app, body).await;
    assert_eq!(response.status().as_u16(), 200, "PUT /devices {device}");
    response.json().await.unwrap()
}

async fn confirm_raw(app: &TestApp, body: &str, secret: Option<&str>) -> reqwest::Response {
    send_with_secret(
        app.agent(http::Method::POST, "/calls/confirm")
            .body(body.to_owned()),
        secret,
    )
    .await
}

async fn confirm(app: &TestApp, device: &str, call: &str) -> reqwest::Response {
    let body = json!({"deviceId": device, "callId": call}).to_string();
    confirm_raw(app, &body, None).await
}

/// Confirms, asserting the 200; returns the body.
async fn confirm_ok(app: &TestApp, device: &str, call: &str) -> Value {
    let response = confirm(app, device, call).await;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "POST /calls/confirm {device}: {body}");
    body
}

/// A reservation at [`AT`] for `device`; its `callId`.
async fn reserve(app: &TestApp, device: &str) -> String {
    let response = post_raw(app, &json!({"deviceId": device, "scheduledAt": AT})).await;
    assert_eq!(response.status().as_u16(), 201, "POST /calls {device}");
    let body: Value = response.json().await.unwrap();
    body["callId"].as_str().unwrap().to_owned()
}

/// The reserved second, [`AT`].
fn at() -> DateTime<Utc> {
    AT.parse().unwrap()
}

fn millis(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A push leaving: the run that claimed and marked it, and the call's pushes with it.
struct Leaving {
    run: RunToken,
    pushes: u32,
}

/// As a dispatch run does: claims the call and writes its push mark (to a device that confirms
/// its calls).
async fn push_leaves(app: &TestApp, device: &str, call: &str) -> Leaving {
    let (id, call) = (device_id(device), CallId::from_stored(call.to_owned()));
    let (run, now) = (RunToken::generate(), app.clock.now());
    let claim = app
        .store
        .claim_due(&id, &call, &run, now, now - Duration::seconds(30));
    let ClaimAnswer::Won { pushes } = claim.await.unwrap() else {
        panic!("claimed {device}");
    };
    let marked = app.store.mark_push_started(&id, &call, &run, now, true);
    assert!(marked.await.unwrap(), "push mark of {device}");
    Leaving {
        run,
        pushes: pushes + 1,
    }
}

/// The push is recorded: the call is due again after the wait.
async fn push_recorded(app: &TestApp, device: &str, call: &str, leaving: &Leaving) {
    let (id, call) = (device_id(device), CallId::from_stored(call.to_owned()));
    let (run, now) = (&leaving.run, app.clock.now());
    let next_at = now + WAIT;
    let outcome = Outcome::Pushed {
        next_at,
        pushes: leaving.pushes,
    };
    let done = app
        .store
        .finish_reservation(&id, &call, outcome, run, now, now - Duration::seconds(30))
        .await
        .unwrap();
    assert!(done, "{device}: push recorded");
}

/// A push of the call left and was recorded, as the dispatcher does it at the call's second.
async fn pushed(app: &TestApp, clock: &ManualClock, device: &str, call: &str) {
    clock.set(at());
    let leaving = push_leaves(app, device, call).await;
    push_recorded(app, device, call, &leaving).await;
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

// ---------------------------------------------------------------------------------------------
// The flows, run on each store.

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

// ---------------------------------------------------------------------------------------------
// A push again of the call leaving while the confirmation comes.

/// The call's first push left and was recorded; its second is claimed and marked now.
async fn second_push_leaving(app: &TestApp, clock: &ManualClock, dev: &str) -> (String, Leaving) {
    register_confirming(app, dev).await;
    let call = reserve(app, dev).await;
    pushed(app, clock, dev, &call).await;
    clock.advance(WAIT);
    let leaving = push_leaves(app, dev, &call).await;
    (call, leaving)
}

#[tokio::test]
async fn a_confirmation_waits_for_a_push_leaving_then_counts() {
    let (app, clock) = app_at_now().await;
    let app = Arc::new(app);
    let device = "confirm-waits";
    let (call, run) = second_push_leaving(&app, &clock, device).await;
    let recorder = {
        let (app, call) = (app.clone(), call.clone());
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            push_recorded(&app, device, &call, &run).await;
        })
    };
    let body = confirm_ok(&app, device, &call).await;
    recorder.await.unwrap();
    assert_eq!(body["status"], "rang", "{body}");
    assert_eq!(body["pushes"], 2, "{body}");
}

#[tokio::test]
async fn a_push_still_leaving_after_the_wait_is_503_with_retry_after() {
    let (app, clock) = app_at_now().await;
    let device = "confirm-in-flight";
    let (call, run) = second_push_leaving(&app, &clock, device).await;
    let started = std::time::Instant::now();
    let response = confirm(&app, device, &call).await;
    assert!(started.elapsed().as_secs() >= 2, "it waited");
    assert_eq!(header(&response, "retry-after").as_deref(), Some("1"));
    error_body(response, 503, "SERVICE_UNAVAILABLE").await;
    assert!(app.events.published().is_empty(), "no error notification");
    // Once the push is recorded, the same confirmation counts.
    push_recorded(&app, device, &call, &run).await;
    let body = confirm_ok(&app, device, &call).await;
    assert_eq!(
        (&body["status"], &body["pushes"]),
        (&json!("rang"), &json!(2))
    );
}
