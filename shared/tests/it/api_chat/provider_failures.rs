//! Provider failures: retries, timeouts, refusals; one notification, never the provider's body.

use std::time::{Duration, Instant};

use koe_testkit::harness::{error_body, route_miss, spawn_app};
use koe_testkit::openai::Behaviour;
use serde_json::{Value, json};

use super::{
    assert_one_notification, assert_provider_failure, chat_body_of_len, chat_with_provider,
    one_message, post_json,
};

/// A fresh app whose provider answers as scripted: a 500 with `code` after `requests` requests.
async fn provider_fails(script: Vec<Behaviour>, code: &str, requests: usize) {
    let app = spawn_app(&[]).await;
    let response = chat_with_provider(&app, script).await;
    assert_provider_failure(&app, response, code, requests).await;
}

/// A fresh app whose provider answers as scripted: a 200 with `content` after two requests.
async fn provider_recovers(script: Vec<Behaviour>, content: &str) {
    let app = spawn_app(&[]).await;
    let response = chat_with_provider(&app, script).await;
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["message"]["content"], content);
    assert_eq!(app.openai.request_count(), 2);
    assert!(app.events.published().is_empty());
}

fn raw(status: u16, body: String) -> Behaviour {
    Behaviour::Raw { status, body }
}

#[tokio::test]
async fn provider_500_twice_is_provider_error_after_exactly_one_retry() {
    let script = vec![Behaviour::server_error(), Behaviour::server_error()];
    provider_fails(script, "PROVIDER_ERROR", 2).await;
}

#[tokio::test]
async fn provider_500_then_success_is_200_after_one_retry() {
    let script = vec![Behaviour::server_error(), Behaviour::complete("second try")];
    provider_recovers(script, "second try").await;
}

#[tokio::test]
async fn rate_limit_429_then_success_is_200_after_one_retry() {
    let script = vec![
        Behaviour::rate_limited(),
        Behaviour::complete("after the limit"),
    ];
    provider_recovers(script, "after the limit").await;
}

#[tokio::test]
async fn insufficient_quota_429_is_insufficient_credits_without_retry() {
    provider_fails(
        vec![Behaviour::insufficient_quota()],
        "INSUFFICIENT_CREDITS",
        1,
    )
    .await;
}

#[tokio::test]
async fn payment_required_402_is_insufficient_credits() {
    let body = json!({"error": {"message": "Payment required", "type": "billing"}});
    provider_fails(vec![raw(402, body.to_string())], "INSUFFICIENT_CREDITS", 1).await;
}

#[tokio::test]
async fn provider_200_with_invalid_json_is_provider_bad_response() {
    provider_fails(vec![Behaviour::garbage()], "PROVIDER_BAD_RESPONSE", 1).await;
}

#[tokio::test]
async fn completion_with_null_content_is_provider_bad_response() {
    provider_fails(vec![Behaviour::refusal()], "PROVIDER_BAD_RESPONSE", 1).await;
}

#[tokio::test]
async fn completion_without_choices_is_provider_bad_response() {
    let body = r#"{"choices": []}"#;
    provider_fails(vec![raw(200, body.into())], "PROVIDER_BAD_RESPONSE", 1).await;
}

#[tokio::test]
async fn provider_401_is_provider_error_without_retry() {
    let body = json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}});
    provider_fails(vec![raw(401, body.to_string())], "PROVIDER_ERROR", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_hang_is_provider_timeout_within_the_budget() {
    let app = spawn_app(&[("PROVIDER_TIMEOUT_MS", "1000")]).await;
    // A valid answer 4 s late: within the default budget (25 s) it would be a 200, so a
    // PROVIDER_TIMEOUT is the configured budget's cut, whatever the machine's load (which can
    // only make the answer later). No wall-clock bound: the code says which budget cut it.
    app.openai
        .set_default(Behaviour::complete("too late").delayed(Duration::from_secs(4)));
    let started = Instant::now();
    let response = post_json(&app, &one_message()).await;
    let elapsed = started.elapsed();
    assert_provider_failure(&app, response, "PROVIDER_TIMEOUT", 1).await;
    assert!(
        elapsed >= Duration::from_millis(900),
        "answered after {elapsed:?}, before the 1000 ms budget ran out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_provider_within_the_budget_still_answers() {
    let app = spawn_app(&[("PROVIDER_TIMEOUT_MS", "2000")]).await;
    app.openai
        .script([Behaviour::complete("slow but fine").delayed(Duration::from_millis(300))]);
    let response = post_json(&app, &one_message()).await;
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["message"]["content"], "slow but fine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_is_provider_error() {
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let base_url = format!("http://127.0.0.1:{closed_port}/v1");
    let app = spawn_app(&[("OPENAI_BASE_URL", &base_url)]).await;
    let response = post_json(&app, &one_message()).await;
    // Not retried until the budget ran out (that would be PROVIDER_TIMEOUT): an error at once.
    assert_provider_failure(&app, response, "PROVIDER_ERROR", 0).await;
}

#[tokio::test]
async fn missing_api_key_is_provider_not_configured_for_valid_requests_only() {
    let app = spawn_app(&[("OPENAI_API_KEY", "")]).await;

    let response = post_json(&app, &json!({"messages": []})).await;
    let body = error_body(response, 400, "INVALID_REQUEST").await;
    assert_eq!(body["message"], "messages must have 1 to 100 items");
    assert!(
        app.events.published().is_empty(),
        "validation comes first, 400 publishes nothing"
    );

    let response = post_json(&app, &one_message()).await;
    let body = error_body(response, 500, "PROVIDER_NOT_CONFIGURED").await;
    assert!(
        body["message"].as_str().unwrap().contains("OPENAI_API_KEY"),
        "the message says what to set: {body}"
    );
    assert_one_notification(&app, "PROVIDER_NOT_CONFIGURED");
    assert_eq!(app.openai.request_count(), 0);
}

#[tokio::test]
async fn a_failed_notification_does_not_change_the_500_answer() {
    let app = spawn_app(&[]).await;
    app.events.fail_from_now();
    let response = chat_with_provider(
        &app,
        vec![Behaviour::server_error(), Behaviour::server_error()],
    )
    .await;
    let body = error_body(response, 500, "PROVIDER_ERROR").await;
    assert_eq!(body["message"], "the model provider failed");
    assert_one_notification(&app, "PROVIDER_ERROR");

    // The server keeps serving after the failed publish.
    let response = post_json(&app, &one_message()).await;
    assert_eq!(response.status().as_u16(), 200);
}

#[tokio::test]
async fn client_errors_publish_no_notification() {
    let app = spawn_app(&[]).await;
    error_body(app.post_chat("{").await, 400, "INVALID_REQUEST").await;
    error_body(
        app.post_chat(chat_body_of_len(70_000)).await,
        400,
        "INVALID_REQUEST",
    )
    .await;
    route_miss(app.get("/api/chat").await, Some("POST")).await;
    route_miss(app.get("/nope").await, None).await;
    assert!(
        app.events.published().is_empty(),
        "{:?}",
        app.events.published()
    );
    // The same app does notify on a 5xx, so the empty list above means something.
    app.openai
        .script([Behaviour::server_error(), Behaviour::server_error()]);
    let response = post_json(&app, &one_message()).await;
    assert_eq!(response.status().as_u16(), 500);
    assert_eq!(app.events.published().len(), 1);
}

#[tokio::test]
async fn provider_error_bodies_are_never_passed_to_the_client() {
    let app = spawn_app(&[]).await;
    let upstream =
        json!({"error": {"message": "UPSTREAM-DETAIL-3b9e", "type": "server_error"}}).to_string();
    let script = vec![raw(503, upstream.clone()), raw(503, upstream)];
    let response = chat_with_provider(&app, script).await;
    let text = {
        assert_eq!(response.status().as_u16(), 500);
        response.text().await.unwrap()
    };
    assert!(!text.contains("UPSTREAM-DETAIL"), "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["code"], "PROVIDER_ERROR");
}
