//! Invalid chat requests: every bad input and every cap is 400 and never reaches the provider.

use koe::chat::api::CHAT_BODY_LIMIT;
use koe::domain::chat::{MAX_CONTENT_CHARS, MAX_MESSAGES, MAX_TOTAL_CONTENT_CHARS};
use koe_testkit::harness::{TestApp, error_body, spawn_app};
use serde_json::{Value, json};

use super::{assert_fits_within, chat_body_of_len, padded_to, post_json, user_messages};

/// `(case, raw body, expected message: exact when it starts with '=', else a fragment)`.
fn invalid_cases() -> Vec<(String, Vec<u8>, String)> {
    let mut cases: Vec<(String, Vec<u8>, String)> = Vec::new();
    let mut raw = |case: &str, body: &str, expected: &str| {
        cases.push((case.into(), body.as_bytes().to_vec(), expected.into()));
    };
    raw(
        "malformed JSON",
        r#"{"messages": ["#,
        "body is not valid JSON",
    );
    raw(
        "trailing garbage",
        r#"{"messages": []} x"#,
        "body is not valid JSON",
    );
    raw("empty body", "", "body");
    raw("whitespace body", "  \n ", "body");
    raw("array body", "[]", "=body must be a JSON object");
    raw("string body", r#""hello""#, "=body must be a JSON object");
    raw("number body", "42", "=body must be a JSON object");
    raw("null body", "null", "=body must be a JSON object");
    raw("messages missing", "{}", "=messages is required");
    raw(
        "messages null",
        r#"{"messages": null}"#,
        "=messages is required",
    );
    raw(
        "messages a string",
        r#"{"messages": "hi"}"#,
        "=messages must be an array",
    );
    raw(
        "messages an object",
        r#"{"messages": {"role": "user", "content": "hi"}}"#,
        "=messages must be an array",
    );
    raw(
        "messages empty",
        r#"{"messages": []}"#,
        "=messages must have 1 to 100 items",
    );
    raw(
        "message a number",
        r#"{"messages": [1]}"#,
        "=messages[0] must be an object",
    );
    raw(
        "second message a string",
        r#"{"messages": [{"role": "user", "content": "a"}, "b"]}"#,
        "=messages[1] must be an object",
    );
    raw(
        "message null",
        r#"{"messages": [null]}"#,
        "=messages[0] must be an object",
    );
    raw(
        "bad role in third message",
        r#"{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "bot", "content": "c"}]}"#,
        "=messages[2].role must be one of system, user, assistant",
    );
    raw(
        "role in wrong case",
        r#"{"messages": [{"role": "User", "content": "a"}]}"#,
        "=messages[0].role must be one of system, user, assistant",
    );
    raw(
        "role missing",
        r#"{"messages": [{"content": "a"}]}"#,
        "=messages[0].role is required",
    );
    raw(
        "role not a string",
        r#"{"messages": [{"role": 1, "content": "a"}]}"#,
        "=messages[0].role must be a string",
    );
    raw(
        "content missing",
        r#"{"messages": [{"role": "user"}]}"#,
        "=messages[0].content is required",
    );
    raw(
        "content empty",
        r#"{"messages": [{"role": "user", "content": ""}]}"#,
        "=messages[0].content must be 1 to 16000 characters",
    );
    raw(
        "content a number",
        r#"{"messages": [{"role": "user", "content": 5}]}"#,
        "=messages[0].content must be a string",
    );
    raw(
        "content an array",
        r#"{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]}"#,
        "=messages[0].content must be a string",
    );
    raw(
        "unknown model",
        r#"{"messages": [{"role": "user", "content": "a"}], "model": "gpt-5"}"#,
        "=model must be one of gpt-4o-mini, gpt-4o",
    );
    raw(
        "model not a string",
        r#"{"messages": [{"role": "user", "content": "a"}], "model": 4}"#,
        "=model must be a string",
    );
    for max_tokens in [
        "0", "-1", "4097", "1e12", "2.5", r#""100""#, "true", "[500]",
    ] {
        raw(
            &format!("maxTokens {max_tokens}"),
            &format!(
                r#"{{"messages": [{{"role": "user", "content": "a"}}], "maxTokens": {max_tokens}}}"#
            ),
            "=maxTokens must be an integer from 1 to 4096",
        );
    }

    let mut value = |case: &str, body: Value, expected: &str| {
        cases.push((case.into(), body.to_string().into_bytes(), expected.into()));
    };
    value(
        "101 messages",
        json!({"messages": user_messages(101)}),
        "=messages must have 1 to 100 items",
    );
    value(
        "content of 16001 characters",
        json!({"messages": [{"role": "user", "content": "x".repeat(16_001)}]}),
        "=messages[0].content must be 1 to 16000 characters",
    );
    value(
        "content of 16001 multi-byte characters in the fourth message",
        json!({"messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
            {"role": "user", "content": "é".repeat(16_001)},
        ]}),
        "=messages[3].content must be 1 to 16000 characters",
    );
    cases
}

async fn check_invalid(app: &TestApp, case: &str, body: Vec<u8>, expected: &str) -> Option<String> {
    let response = app.post_chat(body).await;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap_or("?").to_owned());
    let text = response.text().await.unwrap_or_default();
    let body: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(_) => return Some(format!("{case}: {status} with non-JSON body {text:?}")),
    };
    let message = body["message"].as_str().unwrap_or("");
    let message_ok = match expected.strip_prefix('=') {
        Some(exact) => message == exact,
        None => message.contains(expected),
    };
    if status != 400
        || content_type.as_deref() != Some("application/json")
        || body["code"] != "INVALID_REQUEST"
        || body["error"] != body["message"]
        || !message_ok
    {
        return Some(format!(
            "{case}: expected 400 INVALID_REQUEST with message {expected:?}, got {status} \
             {content_type:?} {body}"
        ));
    }
    None
}

#[tokio::test]
async fn every_class_of_bad_input_is_400_naming_the_field_and_never_reaches_the_provider() {
    let app = spawn_app(&[]).await;
    let mut failures = Vec::new();
    for (case, body, expected) in invalid_cases() {
        failures.extend(check_invalid(&app, &case, body, &expected).await);
    }
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        app.openai.request_count(),
        0,
        "the provider was never called"
    );
    assert!(
        app.events.published().is_empty(),
        "4xx answers publish no notification"
    );
}

#[tokio::test]
async fn unknown_model_is_400_and_never_reaches_the_provider() {
    let app = spawn_app(&[]).await;
    let response = post_json(
        &app,
        &json!({"messages": [{"role": "user", "content": "a"}], "model": "gpt-4"}),
    )
    .await;
    let body = error_body(response, 400, "INVALID_REQUEST").await;
    assert_eq!(body["message"], "model must be one of gpt-4o-mini, gpt-4o");
    assert_eq!(app.openai.request_count(), 0);
}

#[tokio::test]
async fn bodies_over_the_cap_are_400_naming_the_body() {
    let app = spawn_app(&[]).await;
    let mut failures = Vec::new();
    for (case, len) in [
        ("the cap + 1 byte", CHAT_BODY_LIMIT + 1),
        ("about 1 MB", 1024 * 1024),
        (
            "8 MB, still being sent when the answer is ready",
            8 * 1024 * 1024,
        ),
    ] {
        failures.extend(check_invalid(&app, case, chat_body_of_len(len), "body").await);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(app.openai.request_count(), 0);
    assert!(app.events.published().is_empty());
}

/// The largest body the field caps allow, written the most expensive way the cap counts:
/// 100 messages holding 128 000 characters in all, each character a 6-byte `\u0001` escape,
/// `"assistant"` roles, the longest model name and `maxTokens` 4096, compact.
fn largest_chat_body() -> String {
    let per_message = MAX_TOTAL_CONTENT_CHARS / MAX_MESSAGES;
    assert!(per_message <= MAX_CONTENT_CHARS);
    let content = "\\u0001".repeat(per_message);
    let message = format!(r#"{{"role":"assistant","content":"{content}"}}"#);
    let messages = vec![message; MAX_MESSAGES].join(",");
    format!(r#"{{"messages":[{messages}],"model":"gpt-4o-mini","maxTokens":4096}}"#)
}

#[tokio::test]
async fn the_largest_body_the_field_caps_allow_fits_the_cap_and_one_byte_more_does_not() {
    let app = spawn_app(&[]).await;
    let largest = largest_chat_body();
    let parsed: Value = serde_json::from_str(&largest).expect("valid JSON");
    assert_eq!(
        parsed["messages"][99]["content"]
            .as_str()
            .unwrap()
            .chars()
            .count(),
        1280
    );
    // Derived, not guessed: within the cap, and only the slack below it. The formula counts the
    // slack (1024) and a comma after every item, one more than JSON has.
    assert_fits_within(&largest, CHAT_BODY_LIMIT, 1024 + 1);

    let response = app.post_chat(largest.clone()).await;
    assert_eq!(response.status().as_u16(), 200);
    let response = app.post_chat(padded_to(&largest, CHAT_BODY_LIMIT)).await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(app.openai.request_count(), 2);

    let response = app
        .post_chat(padded_to(&largest, CHAT_BODY_LIMIT + 1))
        .await;
    let body = error_body(response, 400, "INVALID_REQUEST").await;
    assert_eq!(
        body["message"],
        format!("body must be at most {CHAT_BODY_LIMIT} bytes")
    );
    assert_eq!(app.openai.request_count(), 2);
}

#[tokio::test]
async fn more_than_128_000_characters_in_all_is_400_naming_messages() {
    let app = spawn_app(&[]).await;
    let mut messages = vec![json!({"role": "user", "content": "y".repeat(MAX_CONTENT_CHARS)}); 8];
    messages.push(json!({"role": "user", "content": "y"}));
    let body = error_body(
        post_json(&app, &json!({ "messages": messages })).await,
        400,
        "INVALID_REQUEST",
    )
    .await;
    assert_eq!(
        body["message"],
        "messages must have at most 128000 characters of content in all"
    );
    assert_eq!(app.openai.request_count(), 0);
}
