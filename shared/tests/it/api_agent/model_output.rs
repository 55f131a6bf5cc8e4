//! The models' structured output checked and retried once; provider failures and time budget.

use std::time::Duration;

use koe_testkit::harness::{error_body, header};
use koe_testkit::openai::Behaviour;

use super::{
    app, app_with, assert_bad_output_twice, assert_one_notification, ok_body, plan_output,
    planner_answer, post, responder_answer, round_1, round_2, tomorrow_plan,
};

#[tokio::test]
async fn planner_output_invalid_then_valid_is_200_after_one_retry() {
    let app = app().await;
    app.openai
        .script([Behaviour::complete("明日は晴れだよ"), tomorrow_plan()]);
    let response = post(&app, round_1("明日の予定").to_string()).await;
    assert_eq!(
        header(&response, "x-ratelimit-remaining").as_deref(),
        Some("49"),
        "counted once"
    );
    assert_eq!(ok_body(response).await["type"], "plan");
    let received = app.openai.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].body, received[1].body, "the same request again");
    assert!(app.events.published().is_empty());
}

#[tokio::test]
async fn planner_output_invalid_twice_is_500_provider_bad_response() {
    let app = app().await;
    app.openai.script([
        // Six steps, then a backwards range: each breaks a rule the schema cannot carry.
        plan_output(&[("2026-03-02T00:00:00+09:00", "2026-03-03T00:00:00+09:00"); 6]),
        plan_output(&[("2026-03-03T00:00:00+09:00", "2026-03-02T00:00:00+09:00")]),
        tomorrow_plan(),
    ]);
    let response = post(&app, round_1("明日の予定").to_string()).await;
    let body = error_body(response, 500, "PROVIDER_BAD_RESPONSE").await;
    assert!(
        !body["message"].as_str().unwrap().contains("明日"),
        "{body}"
    );
    assert_eq!(app.openai.request_count(), 2, "asked once more, not twice");
    assert_one_notification(&app, "PROVIDER_BAD_RESPONSE");
}

#[tokio::test]
async fn responder_output_invalid_then_valid_is_200_after_one_retry() {
    let app = app().await;
    app.openai.script([
        responder_answer("やったね", "excited"),
        responder_answer("やったね", "happy"),
    ]);
    let body = ok_body(post(&app, round_2().to_string()).await).await;
    assert_eq!(body["emotion"], "happy");
    assert_eq!(app.openai.request_count(), 2);
}

#[tokio::test]
async fn responder_output_invalid_twice_is_500_provider_bad_response() {
    let app = app().await;
    app.openai.script([
        responder_answer("   ", "happy"),
        Behaviour::refusal(),
        responder_answer("x", "happy"),
    ]);
    assert_bad_output_twice(&app, &round_2()).await;
}

#[tokio::test]
async fn a_refusal_counts_as_invalid_output_and_is_asked_again() {
    let app = app().await;
    app.openai.script([
        Behaviour::refusal(),
        planner_answer("うん、聞いてるよ。", "neutral"),
    ]);
    let body = ok_body(post(&app, round_1("ねえ").to_string()).await).await;
    assert_eq!(body["reply"], "うん、聞いてるよ。");
    assert_eq!(app.openai.request_count(), 2);
}

#[tokio::test]
async fn a_provider_failure_is_its_own_code_and_the_round_still_counts() {
    let app = app().await;
    app.openai
        .script([Behaviour::server_error(), Behaviour::server_error()]);
    error_body(
        post(&app, round_1("明日").to_string()).await,
        500,
        "PROVIDER_ERROR",
    )
    .await;
    assert_eq!(
        app.openai.request_count(),
        2,
        "the adapter's one retry, no output retry"
    );
    assert_one_notification(&app, "PROVIDER_ERROR");

    app.openai.script([tomorrow_plan()]);
    let response = post(&app, round_1("明日").to_string()).await;
    assert_eq!(
        header(&response, "x-ratelimit-remaining").as_deref(),
        Some("48"),
        "the failed round was counted"
    );
}

#[tokio::test]
async fn both_attempts_share_one_time_budget() {
    let app = app_with(&[("PROVIDER_TIMEOUT_MS", "1000")]).await;
    app.openai.script([
        Behaviour::complete("not json").delayed(Duration::from_millis(700)),
        tomorrow_plan().delayed(Duration::from_millis(700)),
    ]);
    error_body(
        post(&app, round_1("明日").to_string()).await,
        500,
        "PROVIDER_TIMEOUT",
    )
    .await;
    assert_one_notification(&app, "PROVIDER_TIMEOUT");
}

#[tokio::test]
async fn without_a_provider_key_both_rounds_are_500_provider_not_configured() {
    let app = app_with(&[("OPENAI_API_KEY", "")]).await;
    for body in [round_1("m"), round_2()] {
        error_body(
            post(&app, body.to_string()).await,
            500,
            "PROVIDER_NOT_CONFIGURED",
        )
        .await;
    }
    assert_eq!(app.openai.request_count(), 0);
}
