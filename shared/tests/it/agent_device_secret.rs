//! POST /agent with `AGENT_REQUIRE_DEVICE_SECRET` through the real local server and a stand-in
//! OpenAI: off, today's behaviour (no secret needed, the header ignored); on, round 1 only for a
//! registered device presenting its proven `X-Device-Secret` (403 `DEVICE_SECRET_REQUIRED`
//! otherwise, counted nowhere, no model called), round 2 unchecked (docs/security.md, "The
//! agent's daily limit and device ids").

use std::sync::Arc;

use koe::store::prelude::*;
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{
    FailingStore, TestApp, error_body, header, invalid_field, issued_step_id, on_store,
    send_with_secret, spawn_app_with,
};
use koe_testkit::openai::Behaviour;
use serde_json::json;

/// The app's clock: Sunday 2026-03-01, 09:00 in Tokyo.
const NOW: &str = "2026-03-01T00:00:00Z";
const LIMIT: u32 = 5;

async fn app(require: Option<&str>) -> TestApp {
    app_with_store(require, None).await
}

async fn app_with_store(require: Option<&str>, store: Option<Arc<dyn Store>>) -> TestApp {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let limit = LIMIT.to_string();
    let mut vars = vec![("AGENT_DAILY_LIMIT", limit.as_str())];
    if let Some(value) = require {
        vars.push(("AGENT_REQUIRE_DEVICE_SECRET", value));
    }
    let app = spawn_app_with(&vars, |app| on_store(app.with_clock(clock), store)).await;
    app.openai
        .set_default(Behaviour::agent_answer("うん！", "happy"));
    app
}

fn device() -> String {
    format!("secret-{:016x}", fastrand::u64(..))
}

fn token() -> String {
    "0a1b2c3d".repeat(8)
}

async fn round_1(app: &TestApp, device: &str, secret: Option<&str>) -> reqwest::Response {
    let body = json!({"message": "ねえ", "capabilities": ["calendar"], "deviceId": device});
    let request = app
        .agent(http::Method::POST, "/agent")
        .body(body.to_string());
    send_with_secret(request, secret).await
}

/// Round 1 answered, with `remaining` of the day's calls left.
async fn answered(response: reqwest::Response, remaining: u32) {
    let status = response.status().as_u16();
    let left = header(&response, "x-ratelimit-remaining");
    let body = response.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(left, Some(remaining.to_string()), "remaining");
}

/// Round 1 refused 403 with the error body naming the header, and no model called.
async fn secret_required(app: &TestApp, response: reqwest::Response) {
    let before = app.openai.request_count();
    let body = error_body(response, 403, "DEVICE_SECRET_REQUIRED").await;
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("X-Device-Secret"),
        "{body}"
    );
    assert_eq!(app.openai.request_count(), before, "no model called");
}

#[tokio::test]
async fn switch_off_serves_any_device_with_or_without_a_secret_as_today() {
    for require in [None, Some("false")] {
        let app = app(require).await;
        let unregistered = device();
        answered(round_1(&app, &unregistered, None).await, LIMIT - 1).await;
        // The header is ignored: a wrong one, even a malformed one, changes nothing.
        answered(round_1(&app, &unregistered, Some("wrong")).await, LIMIT - 2).await;
        answered(round_1(&app, &unregistered, Some("")).await, LIMIT - 3).await;
        let device = device();
        app.register_proven_device(&device, &token()).await;
        answered(round_1(&app, &device, None).await, LIMIT - 1).await;
    }
}

#[tokio::test]
async fn switch_on_serves_round_1_only_for_a_registered_device_presenting_its_proven_secret() {
    let app = app(Some("true")).await;
    // Never registered: refused, with or without a secret.
    let stranger = device();
    secret_required(&app, round_1(&app, &stranger, None).await).await;
    secret_required(&app, round_1(&app, &stranger, Some(&"a".repeat(64))).await).await;

    // Registered, its secret not proven yet: refused, even presenting it.
    let device = device();
    let secret = app.register_device(&device, &token()).await;
    secret_required(&app, round_1(&app, &device, None).await).await;
    secret_required(&app, round_1(&app, &device, Some(&secret)).await).await;

    // Proven: served with it; refused without it or with another value.
    app.put_device(&device, &token(), Some(&secret)).await;
    answered(round_1(&app, &device, Some(&secret)).await, LIMIT - 1).await;
    secret_required(&app, round_1(&app, &device, None).await).await;
    let wrong = format!("{}0", &secret[1..]);
    secret_required(&app, round_1(&app, &device, Some(&wrong)).await).await;
    // The refusals were counted nowhere.
    answered(round_1(&app, &device, Some(&secret)).await, LIMIT - 2).await;

    // A malformed header names itself.
    invalid_field(
        round_1(&app, &device, Some(&"a".repeat(129))).await,
        "X-Device-Secret",
    )
    .await;
}

async fn get_calls(app: &TestApp, device: &str, secret: Option<&str>) -> reqwest::Response {
    let request = app.agent(http::Method::GET, &format!("/calls?deviceId={device}"));
    send_with_secret(request, secret).await
}

/// One rule for every feature (`koe::devices::admitted`): a secret proven on `/calls` (a
/// request presenting it there) is the proven secret round 1 needs, and from then on `/calls`
/// too refuses the device's requests without it.
#[tokio::test]
async fn a_secret_proven_on_calls_serves_round_1() {
    let app = app(Some("true")).await;
    let device = device();
    let secret = app.register_device(&device, &token()).await;
    secret_required(&app, round_1(&app, &device, Some(&secret)).await).await;
    // No reservation yet: 404, and the presented secret is proven.
    assert_eq!(
        get_calls(&app, &device, Some(&secret))
            .await
            .status()
            .as_u16(),
        404
    );
    answered(round_1(&app, &device, Some(&secret)).await, LIMIT - 1).await;
    error_body(
        get_calls(&app, &device, None).await,
        403,
        "DEVICE_SECRET_REQUIRED",
    )
    .await;
}

#[tokio::test]
async fn switch_on_leaves_round_2_to_its_binding_to_round_1() {
    let app = app(Some("1")).await;
    let device = device();
    app.register_proven_device(&device, &token()).await;
    app.openai.script([Behaviour::complete(
        json!({"reply": "あしたは歯医者さんだね。", "emotion": "neutral"}).to_string(),
    )]);
    let step_id = issued_step_id(&device, app.clock.now());
    let round_2 = json!({"message": "ねえ", "deviceId": device, "results": [
        {"stepId": step_id, "tool": "calendar", "output": {"events": []}}]});
    let response = app.post_agent(&round_2).await;
    let status = response.status().as_u16();
    let body = response.text().await.unwrap();
    assert_eq!(status, 200, "round 2 needs no secret: {body}");
}

#[tokio::test]
async fn switch_on_with_the_devices_table_down_fails_closed() {
    let app = app_with_store(Some("true"), Some(Arc::new(FailingStore))).await;
    let response = round_1(&app, &device(), Some(&"a".repeat(64))).await;
    error_body(response, 503, "SERVICE_UNAVAILABLE").await;
    assert_eq!(app.openai.request_count(), 0, "no model called");
}
