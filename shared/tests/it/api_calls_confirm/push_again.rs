//! A push again of the call leaving while the confirmation comes.

use std::sync::Arc;

use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{TestApp, error_body, header};
use serde_json::json;

use super::{
    Leaving, WAIT, app_at_now, confirm, confirm_ok, push_leaves, push_recorded, pushed,
    register_confirming, reserve,
};

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
