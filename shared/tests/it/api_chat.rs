//! POST /api/chat over HTTP against the real local server, with a stand-in OpenAI on loopback.

use std::time::{Duration, Instant};

use koe::domain::chat::{MAX_CONTENT_CHARS, MAX_MESSAGES, MAX_TOTAL_CONTENT_CHARS};
use koe::routes::CHAT_BODY_LIMIT;
use koe_testkit::harness::{TestApp, error_body, route_miss, spawn_app};
use koe_testkit::openai::Behaviour;
use serde_json::{Value, json};

const ROUTE: &str = "POST /api/chat";

fn one_message() -> Value {
    json!({"messages": [{"role": "user", "content": "Hello?"}]})
}

fn user_messages(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| json!({"role": "user", "content": format!("message {i}")}))
            .collect(),
    )
}

async fn post_json(app: &TestApp, body: &Value) -> reqwest::Response {
    app.post_chat(body.to_string()).await
}

/// Asserts exactly one error notification for this route with `code`.
fn assert_one_notification(app: &TestApp, code: &str) {
    let published = app.events.published();
    assert_eq!(published.len(), 1, "one notification: {published:?}");
    let n = &published[0];
    assert_eq!(n.code, code, "notification code");
    assert_eq!(n.route, ROUTE, "notification route");
    assert_eq!(n.status, 500, "notification status");
    assert_eq!(n.function, "chat", "notification function");
    assert!(!n.request_id.is_empty(), "notification request id");
}

/// Posts the valid one-message body with the provider scripted as given; returns the response.
async fn chat_with_provider(app: &TestApp, script: Vec<Behaviour>) -> reqwest::Response {
    app.openai.script(script);
    post_json(app, &one_message()).await
}

/// Asserts a 500 with `code`, its matching notification and the number of provider requests.
async fn assert_provider_failure(
    app: &TestApp,
    response: reqwest::Response,
    code: &str,
    provider_requests: usize,
) {
    let request_id = response
        .headers()
        .get("x-request-id")
        .map(|v| v.to_str().unwrap().to_owned());
    error_body(response, 500, code).await;
    assert_one_notification(app, code);
    assert_eq!(
        request_id.as_deref(),
        Some(app.events.published()[0].request_id.as_str()),
        "notification carries the answer's x-request-id"
    );
    assert_eq!(
        app.openai.request_count(),
        provider_requests,
        "requests the provider received"
    );
}

// ---------------------------------------------------------------------------------------------
// Success

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

// ---------------------------------------------------------------------------------------------
// Validation

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

/// A valid-JSON chat body of exactly `len` bytes (its content may break the content rule).
fn chat_body_of_len(len: usize) -> Vec<u8> {
    let prefix = r#"{"messages":[{"role":"user","content":""#;
    let suffix = r#""}]}"#;
    let pad = len - prefix.len() - suffix.len();
    let body = format!("{prefix}{}{suffix}", "x".repeat(pad));
    assert_eq!(body.len(), len);
    serde_json::from_str::<Value>(&body).expect("valid JSON");
    body.into_bytes()
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

/// `largest` fits under the cap `limit` and leaves at most `slack` bytes of it unused.
pub(super) fn assert_fits_within(largest: &str, limit: usize, slack: usize) {
    assert!(largest.len() <= limit, "{} > {limit}", largest.len());
    assert!(limit - largest.len() <= slack, "{}", largest.len());
}

/// `body` (a JSON object) with an unknown field padding it to exactly `len` bytes.
pub(super) fn padded_to(body: &str, len: usize) -> String {
    let head = &body[..body.len() - 1];
    let pad = len - body.len() - r#","pad":"""#.len();
    let padded = format!(r#"{head},"pad":"{}"}}"#, "x".repeat(pad));
    assert_eq!(padded.len(), len);
    padded
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

// ---------------------------------------------------------------------------------------------
// Provider failures

#[tokio::test]
async fn provider_500_twice_is_provider_error_after_exactly_one_retry() {
    let app = spawn_app(&[]).await;
    let response = chat_with_provider(
        &app,
        vec![Behaviour::server_error(), Behaviour::server_error()],
    )
    .await;
    assert_provider_failure(&app, response, "PROVIDER_ERROR", 2).await;
}

#[tokio::test]
async fn provider_500_then_success_is_200_after_one_retry() {
    let app = spawn_app(&[]).await;
    let response = chat_with_provider(
        &app,
        vec![Behaviour::server_error(), Behaviour::complete("second try")],
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["message"]["content"], "second try");
    assert_eq!(app.openai.request_count(), 2);
    assert!(app.events.published().is_empty());
}

#[tokio::test]
async fn rate_limit_429_then_success_is_200_after_one_retry() {
    let app = spawn_app(&[]).await;
    let response = chat_with_provider(
        &app,
        vec![
            Behaviour::rate_limited(),
            Behaviour::complete("after the limit"),
        ],
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["message"]["content"], "after the limit");
    assert_eq!(app.openai.request_count(), 2);
    assert!(app.events.published().is_empty());
}

#[tokio::test]
async fn insufficient_quota_429_is_insufficient_credits_without_retry() {
    let app = spawn_app(&[]).await;
    let response = chat_with_provider(&app, vec![Behaviour::insufficient_quota()]).await;
    assert_provider_failure(&app, response, "INSUFFICIENT_CREDITS", 1).await;
}

#[tokio::test]
async fn payment_required_402_is_insufficient_credits() {
    let app = spawn_app(&[]).await;
    let response = chat_with_provider(
        &app,
        vec![Behaviour::Raw {
            status: 402,
            body: json!({"error": {"message": "Payment required", "type": "billing"}}).to_string(),
        }],
    )
    .await;
    assert_provider_failure(&app, response, "INSUFFICIENT_CREDITS", 1).await;
}

#[tokio::test]
async fn provider_200_with_invalid_json_is_provider_bad_response() {
    let app = spawn_app(&[]).await;
    let response = chat_with_provider(&app, vec![Behaviour::garbage()]).await;
    assert_provider_failure(&app, response, "PROVIDER_BAD_RESPONSE", 1).await;
}

#[tokio::test]
async fn completion_with_null_content_is_provider_bad_response() {
    let app = spawn_app(&[]).await;
    let response = chat_with_provider(&app, vec![Behaviour::refusal()]).await;
    assert_provider_failure(&app, response, "PROVIDER_BAD_RESPONSE", 1).await;
}

#[tokio::test]
async fn completion_without_choices_is_provider_bad_response() {
    let app = spawn_app(&[]).await;
    let response = chat_with_provider(
        &app,
        vec![Behaviour::Raw {
            status: 200,
            body: r#"{"choices": []}"#.into(),
        }],
    )
    .await;
    assert_provider_failure(&app, response, "PROVIDER_BAD_RESPONSE", 1).await;
}

#[tokio::test]
async fn provider_401_is_provider_error_without_retry() {
    let app = spawn_app(&[]).await;
    let response = chat_with_provider(
        &app,
        vec![Behaviour::Raw {
            status: 401,
            body: json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}}).to_string(),
        }],
    )
    .await;
    assert_provider_failure(&app, response, "PROVIDER_ERROR", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_hang_is_provider_timeout_within_the_budget() {
    let app = spawn_app(&[("PROVIDER_TIMEOUT_MS", "1000")]).await;
    app.openai.set_default(Behaviour::Hang);
    let started = Instant::now();
    let response = post_json(&app, &one_message()).await;
    let elapsed = started.elapsed();
    assert_provider_failure(&app, response, "PROVIDER_TIMEOUT", 1).await;
    assert!(
        elapsed >= Duration::from_millis(900),
        "answered after {elapsed:?}, before the 1000 ms budget ran out"
    );
    assert!(
        elapsed < Duration::from_millis(2500),
        "answered after {elapsed:?}, well past the 1000 ms budget"
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
    let started = Instant::now();
    let response = post_json(&app, &one_message()).await;
    let elapsed = started.elapsed();
    assert_provider_failure(&app, response, "PROVIDER_ERROR", 0).await;
    assert!(
        elapsed < Duration::from_secs(5),
        "a refused connection fails fast, took {elapsed:?}"
    );
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
    let response = chat_with_provider(
        &app,
        vec![
            Behaviour::Raw {
                status: 503,
                body: upstream.clone(),
            },
            Behaviour::Raw {
                status: 503,
                body: upstream,
            },
        ],
    )
    .await;
    let text = {
        assert_eq!(response.status().as_u16(), 500);
        response.text().await.unwrap()
    };
    assert!(!text.contains("UPSTREAM-DETAIL"), "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["code"], "PROVIDER_ERROR");
}
