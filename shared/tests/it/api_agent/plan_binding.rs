//! Round 2 bound to round 1: only step ids round 1 issued, a bounded number of times.

use std::sync::Arc;

use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{TestApp, invalid_field, spawn_app_with};
use serde_json::{Value, json};

use super::{DEVICE, NOW, ok_body, post, responder_answer, round_1, tomorrow_plan, with};

/// An app on a clock the test moves, and the clock.
async fn app_and_clock() -> (TestApp, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let app = spawn_app_with(&[], {
        let clock = clock.clone();
        |app| app.with_clock(clock)
    })
    .await;
    (app, clock)
}

/// Runs a round 1 that plans one calendar step and returns the plan's step ids.
async fn planned_ids(app: &TestApp) -> Vec<String> {
    app.openai.script([tomorrow_plan()]);
    let body = ok_body(post(app, round_1("明日の予定は？").to_string()).await).await;
    body["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

fn round_2_for(ids: &[&str]) -> Value {
    let results: Vec<Value> = ids
        .iter()
        .map(|id| json!({"stepId": id, "tool": "calendar", "output": {"events": []}}))
        .collect();
    json!({"message": "明日の予定は？", "deviceId": DEVICE, "results": results})
}

/// Asserts that round 2 answering the step `ids` is a 400 naming `field` whose message
/// contains `words`, and that no model was called for it.
async fn refused(app: &TestApp, ids: &[&str], field: &str, words: &str) {
    let calls = app.openai.request_count();
    let body = round_2_for(ids).to_string();
    let body = invalid_field(post(app, body).await, field).await;
    let message = body["message"].as_str().unwrap();
    assert!(message.contains(words), "{message}");
    assert_eq!(
        app.openai.request_count(),
        calls,
        "no model call: {message}"
    );
}

#[tokio::test]
async fn round_1_then_round_2_works_as_before_for_the_app() {
    let (app, _) = app_and_clock().await;
    let ids = planned_ids(&app).await;
    assert_eq!(ids.len(), 1);
    app.openai
        .script([responder_answer("あしたは何もないよ。", "neutral")]);
    let body = ok_body(post(&app, round_2_for(&[&ids[0]]).to_string()).await).await;
    assert_eq!(body["reply"], "あしたは何もないよ。");
    assert_eq!(app.openai.request_count(), 2, "planner, then responder");
    // The responder sees the step's number, not its signature.
    let data = app.openai.received()[1].body["messages"][2]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(data.contains(r#""stepId":"s1""#), "{data}");
    assert!(!data.contains(&ids[0]), "{data}");
    assert!(app.events.published().is_empty());
}

#[tokio::test]
async fn made_up_step_ids_are_400_and_call_no_model() {
    let (app, _) = app_and_clock().await;
    for made_up in [
        "s1".to_owned(),
        "step-1".to_owned(),
        format!("s1.{}", "A".repeat(60)),
        "s1.AAAAAAAAAAAAAA.000000000000.9999999999.AAAAAAAAAAAAAAAAAAAAAA".to_owned(),
    ] {
        refused(
            &app,
            &[&made_up],
            "results[0].stepId",
            "was not issued by round 1",
        )
        .await;
    }
    // Signed with another key: not ours either.
    let foreign = {
        let other = spawn_app_with(
            &[("AGENT_STEP_KEY", "another-stack-key-0123456789abcdef")],
            {
                let clock = Arc::new(ManualClock::at_rfc3339(NOW));
                |app| app.with_clock(clock)
            },
        )
        .await;
        planned_ids(&other).await.remove(0)
    };
    refused(&app, &[&foreign], "results[0].stepId", "was not issued").await;
    assert_eq!(app.openai.request_count(), 0);
}

#[tokio::test]
async fn altered_step_ids_are_400_and_call_no_model() {
    let (app, _) = app_and_clock().await;
    let id = planned_ids(&app).await.remove(0);
    // Every part: the step number, plan id, device hash, expiry and signature.
    for position in [1, 5, 20, 30, 40, 63] {
        let mut altered = id.clone().into_bytes();
        altered[position] = if altered[position] == b'7' {
            b'8'
        } else {
            b'7'
        };
        let altered = String::from_utf8(altered).unwrap();
        refused(&app, &[&altered], "results[0].stepId", "was not issued").await;
    }
    // A step the plan does not have, and the same step twice.
    refused(&app, &[&id, &id], "results[1].stepId", "another plan").await;
    assert_eq!(app.openai.request_count(), 1, "only the planner");
}

#[tokio::test]
async fn another_devices_step_ids_are_refused_as_forged_ones_are() {
    let (app, clock) = app_and_clock().await;
    let id = planned_ids(&app).await.remove(0);
    let answer = |body: Value| {
        let app = &app;
        async move {
            let calls = app.openai.request_count();
            let body = invalid_field(post(app, body.to_string()).await, "results[0].stepId").await;
            assert_eq!(app.openai.request_count(), calls, "no model call");
            body
        }
    };
    let mut forged = id.clone().into_bytes();
    forged[63] = if forged[63] == b'A' { b'B' } else { b'A' };
    let forged = answer(round_2_for(&[&String::from_utf8(forged).unwrap()])).await;
    let other_device = with(round_2_for(&[&id]), "deviceId", json!("another-device"));
    assert_eq!(answer(other_device.clone()).await, forged);
    assert!(
        forged["message"]
            .as_str()
            .unwrap()
            .contains("was not issued by round 1 for this deviceId"),
        "{forged}"
    );
    // Expired too: the answer does not tell that the id is genuine for some other device.
    clock.advance(chrono::Duration::minutes(10));
    assert_eq!(answer(other_device).await, forged);
    assert_eq!(app.openai.request_count(), 1, "only the planner");
}

#[tokio::test]
async fn expired_step_ids_are_400_and_call_no_model() {
    let (app, clock) = app_and_clock().await;
    let id = planned_ids(&app).await.remove(0);
    clock.advance(chrono::Duration::minutes(10));
    refused(&app, &[&id], "results[0].stepId", "has expired").await;
    assert_eq!(app.openai.request_count(), 1, "only the planner");
}

#[tokio::test]
async fn a_plan_is_answered_at_most_three_times() {
    let (app, _) = app_and_clock().await;
    let id = planned_ids(&app).await.remove(0);
    for _ in 0..3 {
        app.openai.script([responder_answer("またね", "happy")]);
        ok_body(post(&app, round_2_for(&[&id]).to_string()).await).await;
    }
    refused(
        &app,
        &[&id],
        "results[0].stepId",
        "already answered 3 times",
    )
    .await;
    assert_eq!(app.openai.request_count(), 4, "planner + three responders");
    // A new round 1 (counted) gives a new plan.
    let fresh = planned_ids(&app).await.remove(0);
    app.openai.script([responder_answer("またね", "happy")]);
    ok_body(post(&app, round_2_for(&[&fresh]).to_string()).await).await;
}
