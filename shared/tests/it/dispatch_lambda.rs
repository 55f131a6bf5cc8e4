//! The dispatch Lambda's entrypoint, in-process: the committed fixtures `events/dispatch.json`
//! (API Gateway HTTP API) and `events/dispatch-schedule.json` (the EventBridge schedule) go
//! through `koe::app::lambda::dispatch::handle` exactly as the runtime would hand them over.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{Duration, FixedOffset, Utc};
use koe::App;
use koe::app::edge::Service;
use koe::app::lambda::dispatch::handle;
use koe::app::ports::Adapters;
use koe::dispatch::api::Dispatch;
use koe::domain::reservation::ReservationStatus;
use koe::platform::config::Vars;
use koe_testkit::dispatching::{CountingTrigger, reserve_at};
use koe_testkit::oidc::{self, StandInIssuer};
use koe_testkit::push::RecordingPushSender;
use koe_testkit::template::repo_root;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(repo_root().join("events").join(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn event(payload: Value) -> LambdaEvent<Value> {
    LambdaEvent::new(payload, Context::default())
}

async fn app(vars: &[(&str, &str)], short_window: bool) -> App {
    let app = App::local(Vars::from_pairs(vars));
    if !short_window {
        return app;
    }
    // A real-clock run: 2 s instead of 70 s, re-selecting every 500 ms.
    let mut settings = app.dispatch_settings().unwrap();
    settings.window = StdDuration::from_secs(2);
    settings.reselect_every = StdDuration::from_millis(500);
    app.with_dispatch_settings(settings)
}

/// The dispatch function's service on `app`'s adapters.
async fn service(app: &App) -> Service<Dispatch> {
    app.service::<Dispatch>().await.unwrap()
}

#[tokio::test]
async fn the_schedule_fixture_runs_a_dispatch() {
    let app = app(&[], true).await;
    let push = Arc::new(RecordingPushSender::new(app.clock()));
    let app = app.with_push(push.clone());

    let now = Utc::now();
    let second = now + Duration::milliseconds(1000);
    let jst = FixedOffset::east_opt(9 * 3600).unwrap();
    let store = app.store().await.unwrap();
    let token = "ab".repeat(32);
    let r = reserve_at(
        &*store,
        "schedule-fixture",
        &token,
        second.with_timezone(&jst),
        now,
    )
    .await;

    let summary = handle(
        &service(&app).await,
        event(fixture("dispatch-schedule.json")),
    )
    .await
    .expect("a scheduled event runs the dispatcher");
    assert_eq!(summary["cause"], "schedule");
    assert_eq!(summary["sent"], 1, "{summary}");
    let pushes = push.sent();
    assert_eq!(pushes.len(), 1);
    assert_eq!(pushes[0].call_id, r.call_id.as_str());
    assert!(pushes[0].at >= second, "never early");
    let stored = app
        .store()
        .await
        .unwrap()
        .get_reservation(&r.device_id, Utc::now())
        .await
        .unwrap();
    assert_eq!(stored.unwrap().status, ReservationStatus::Sent);
}

#[tokio::test]
async fn the_http_fixture_is_refused_with_401_in_api_gateway_shape() {
    let app = app(&[], false).await;
    let response = handle(&service(&app).await, event(fixture("dispatch.json")))
        .await
        .expect("an HTTP event gets an HTTP answer");
    assert_eq!(response["statusCode"], 401, "{response}");
    assert_eq!(response["headers"]["content-type"], "application/json");
    let body: Value = serde_json::from_str(response["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["code"], "UNAUTHORIZED");
    assert_eq!(body["error"], body["message"]);
}

#[tokio::test]
async fn a_valid_token_in_the_http_event_is_accepted_and_the_run_handed_on() {
    let issuer = StandInIssuer::start().await;
    let vars = issuer.vars();
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let trigger = Arc::new(CountingTrigger::default());
    let app = app(&vars, false)
        .await
        .with_dispatch_trigger(trigger.clone());

    let mut payload = fixture("dispatch.json");
    payload["headers"]["authorization"] = format!("Bearer {}", oidc::valid_token()).into();
    let response = handle(&service(&app).await, event(payload)).await.unwrap();
    assert_eq!(response["statusCode"], 202, "{response}");
    let body: Value = serde_json::from_str(response["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["status"], "accepted");
    assert_eq!(trigger.count(), 1, "one run requested");

    // The committed placeholder token is refused by the same app.
    let response = handle(&service(&app).await, event(fixture("dispatch.json")))
        .await
        .unwrap();
    assert_eq!(response["statusCode"], 401);
    assert_eq!(trigger.count(), 1);
}

#[tokio::test]
async fn a_requested_run_event_runs_the_dispatcher() {
    let app = app(&[], true).await;
    // events/dispatch-requested.json: what POST /internal/dispatch puts on the bus, as the
    // EventBridge rule delivers it.
    let payload = fixture("dispatch-requested.json");
    let summary = handle(&service(&app).await, event(payload)).await.unwrap();
    assert_eq!(summary["cause"], "request");
    assert_eq!(summary["sent"], 0);
}

#[tokio::test]
async fn an_unknown_event_is_an_error_not_a_run() {
    let app = app(&[], false).await;
    let result = handle(
        &service(&app).await,
        event(serde_json::json!({"hello": "world"})),
    )
    .await;
    assert!(result.is_err());
}
