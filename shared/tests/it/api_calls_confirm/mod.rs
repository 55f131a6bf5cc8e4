//! POST /calls/confirm and `confirmsCalls` over HTTP against the real local server, with a manual
//! clock, on the memory store and on DynamoDB Local. Pushes are driven through the store the
//! server uses, as the dispatcher makes them (claim, push mark, outcome). Here: the shared app,
//! requests and pushes; the flows and the push again beside it.

mod flows;
mod push_again;

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use koe::domain::reservation::{CallId, RunToken};
use koe::store::{ClaimAnswer, ClaimMark, Outcome};
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{TestApp, send, send_with_secret, spawn_app_with};
use serde_json::{Value, json};

use super::api_calls::{device_id, post_raw, token};

/// The tests' time: in 2035, so that no TTL they write on DynamoDB Local has passed by the wall
/// clock (it deletes expired items at moments of its own: docs/testing.md).
pub(super) const NOW: &str = "2035-03-01T00:00:00Z";
/// 30 s after [`NOW`], in JST.
const AT: &str = "2035-03-01T09:00:30+09:00";

pub(super) async fn app_at_now() -> (TestApp, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let app = spawn_app_with(&[], |app| app.with_clock(clock.clone())).await;
    (app, clock)
}

/// How long the dispatcher waits for a confirmation before it pushes again (its default).
pub(super) const WAIT: Duration = Duration::seconds(5);

pub(super) async fn put_device(app: &TestApp, body: Value) -> reqwest::Response {
    send(
        app.agent(http::Method::PUT, "/devices")
            .body(body.to_string()),
    )
    .await
}

/// Registers `device` as an app that confirms its calls; the registration's answer.
pub(super) async fn register_confirming(app: &TestApp, device: &str) -> Value {
    let body = json!({"deviceId": device, "voipToken": token(), "confirmsCalls": true});
    let response = put_device(app, body).await;
    assert_eq!(response.status().as_u16(), 200, "PUT /devices {device}");
    response.json().await.unwrap()
}

pub(super) async fn confirm_raw(
    app: &TestApp,
    body: &str,
    secret: Option<&str>,
) -> reqwest::Response {
    send_with_secret(
        app.agent(http::Method::POST, "/calls/confirm")
            .body(body.to_owned()),
        secret,
    )
    .await
}

pub(super) async fn confirm(app: &TestApp, device: &str, call: &str) -> reqwest::Response {
    let body = json!({"deviceId": device, "callId": call}).to_string();
    confirm_raw(app, &body, None).await
}

/// Confirms, asserting the 200; returns the body.
pub(super) async fn confirm_ok(app: &TestApp, device: &str, call: &str) -> Value {
    let response = confirm(app, device, call).await;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "POST /calls/confirm {device}: {body}");
    body
}

/// A reservation at [`AT`] for `device`; its `callId`.
pub(super) async fn reserve(app: &TestApp, device: &str) -> String {
    let response = post_raw(app, &json!({"deviceId": device, "scheduledAt": AT})).await;
    assert_eq!(response.status().as_u16(), 201, "POST /calls {device}");
    let body: Value = response.json().await.unwrap();
    body["callId"].as_str().unwrap().to_owned()
}

/// The reserved second, [`AT`].
pub(super) fn at() -> DateTime<Utc> {
    AT.parse().unwrap()
}

/// A push leaving: the run that claimed and marked it, and the call's pushes with it.
pub(super) struct Leaving {
    run: RunToken,
    pushes: u32,
}

/// As a dispatch run does: claims the call and writes its push mark (to a device that confirms
/// its calls).
pub(super) async fn push_leaves(app: &TestApp, device: &str, call: &str) -> Leaving {
    let (id, call) = (device_id(device), CallId::from_stored(call.to_owned()));
    let (run, now) = (RunToken::generate(), app.clock.now());
    let claim = app.store.claim_due(
        &id,
        &call,
        &run,
        now,
        now - Duration::seconds(30),
        ClaimMark::Apart,
    );
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
pub(super) async fn push_recorded(app: &TestApp, device: &str, call: &str, leaving: &Leaving) {
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
pub(super) async fn pushed(app: &TestApp, clock: &ManualClock, device: &str, call: &str) {
    clock.set(at());
    let leaving = push_leaves(app, device, call).await;
    push_recorded(app, device, call, &leaving).await;
}
