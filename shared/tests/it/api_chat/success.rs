//! A valid chat request: the reply, both usage shapes, the defaults and the inclusive limits.

use koe_testkit::harness::spawn_app;
use koe_testkit::openai::Behaviour;
use serde_json::{Value, json};

use super::{one_message, post_json, user_messages};

#[tokio::test]
async fn success_returns_the_reply_with_both_usage_shapes_and_sends_the_bearer_key() {
    let app = spawn_app(&[]).await;
    app.openai.script([Behaviour::Complete {
        content: "Hello from the stand-in".into(),
        prompt_tokens: 40,
        completion_tokens: 17,
    }]);
    let response = post_json(&app, &one_message()).await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert!(
        response
            .headers()
            .get("x-request-id")
            .is_some_and(|v| !v.is_empty()),
        "x-request-id"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({
            "message": {"role": "assistant", "content": "Hello from the stand-in"},
            "tokensUsed": 57,
            "usage": {"promptTokens": 40, "completionTokens": 17, "totalTokens": 57}
        })
    );
    assert_eq!(body["tokensUsed"], body["usage"]["totalTokens"]);

    let received = app.openai.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].authorization.as_deref(),
        Some("Bearer sk-test-key")
    );
    assert!(app.events.published().is_empty(), "no notification on 200");
}

#[tokio::test]
async fn defaults_are_gpt_4o_mini_and_500_max_tokens() {
    let app = spawn_app(&[]).await;
    let response = post_json(&app, &one_message()).await;
    assert_eq!(response.status().as_u16(), 200);
    let received = app.openai.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].body["model"], "gpt-4o-mini");
    assert_eq!(received[0].body["max_tokens"], 500);
}

#[tokio::test]
async fn model_and_max_tokens_are_forwarded_with_the_messages_in_order() {
    let app = spawn_app(&[]).await;
    let messages = json!([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "First question"},
        {"role": "assistant", "content": "First answer"},
        {"role": "user", "content": "Second question"},
    ]);
    let response = post_json(
        &app,
        &json!({"messages": messages, "model": "gpt-4o", "maxTokens": 4096}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    let received = app.openai.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].body["model"], "gpt-4o");
    assert_eq!(received[0].body["max_tokens"], 4096);
    assert_eq!(received[0].body["messages"], messages);
}

#[tokio::test]
async fn integral_float_max_tokens_is_accepted_as_an_integer() {
    let app = spawn_app(&[]).await;
    let response = app
        .post_chat(r#"{"messages":[{"role":"user","content":"hi"}],"maxTokens":500.0}"#)
        .await;
    assert_eq!(response.status().as_u16(), 200);
    let received = app.openai.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].body["max_tokens"], json!(500));
}

#[tokio::test]
async fn unknown_fields_and_null_optionals_are_ignored() {
    let app = spawn_app(&[]).await;
    let response = post_json(
        &app,
        &json!({
            "messages": [{"role": "user", "content": "hi", "name": "ignored"}],
            "model": null,
            "maxTokens": null,
            "stream": true,
            "temperature": 2,
        }),
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    let body = &app.openai.received()[0].body;
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["max_tokens"], 500);
    assert!(body.get("stream").is_none(), "stream is not forwarded");
    assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
}

#[tokio::test]
async fn limits_are_inclusive_100_messages_and_16000_characters() {
    let app = spawn_app(&[]).await;
    let response = post_json(&app, &json!({"messages": user_messages(100)})).await;
    assert_eq!(response.status().as_u16(), 200, "100 messages");
    let content = "あ".repeat(16_000);
    let response = post_json(
        &app,
        &json!({"messages": [{"role": "user", "content": content}], "maxTokens": 1}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 200, "16000 characters");
    assert_eq!(app.openai.request_count(), 2);
}
