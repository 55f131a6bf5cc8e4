//! POST /api/chat over HTTP against the real local server, with a stand-in OpenAI on loopback.

mod provider_failures;
mod success;
mod validation;

use koe_testkit::harness::{TestApp, error_body};
use koe_testkit::openai::Behaviour;
use serde_json::{Value, json};

pub(super) const ROUTE: &str = "POST /api/chat";

pub(super) fn one_message() -> Value {
    json!({"messages": [{"role": "user", "content": "Hello?"}]})
}

pub(super) fn user_messages(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| json!({"role": "user", "content": format!("message {i}")}))
            .collect(),
    )
}

pub(super) async fn post_json(app: &TestApp, body: &Value) -> reqwest::Response {
    app.post_chat(body.to_string()).await
}

/// Asserts exactly one error notification for this route with `code`.
pub(super) fn assert_one_notification(app: &TestApp, code: &str) {
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
pub(super) async fn chat_with_provider(app: &TestApp, script: Vec<Behaviour>) -> reqwest::Response {
    app.openai.script(script);
    post_json(app, &one_message()).await
}

/// Asserts a 500 with `code`, its matching notification and the number of provider requests.
pub(super) async fn assert_provider_failure(
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

/// A valid-JSON chat body of exactly `len` bytes (its content may break the content rule).
pub(super) fn chat_body_of_len(len: usize) -> Vec<u8> {
    let prefix = r#"{"messages":[{"role":"user","content":""#;
    let suffix = r#""}]}"#;
    let pad = len - prefix.len() - suffix.len();
    let body = format!("{prefix}{}{suffix}", "x".repeat(pad));
    assert_eq!(body.len(), len);
    serde_json::from_str::<Value>(&body).expect("valid JSON");
    body.into_bytes()
}
