//! No personal data in the logs: the chat flow runs with sentinel strings in every place personal
//! data goes (message contents, the API key, the model's reply, provider error bodies), while a
//! trace-level capture of everything the process logs (our crates and dependencies) is scanned.
//!
//! Its own test binary, so the capture sees only this binary's runs.

use std::time::Duration;

use koe_testkit::harness::{TestApp, spawn_app};
use koe_testkit::logs;
use koe_testkit::openai::{Behaviour, Pace};
use serde_json::{Value, json};

const MESSAGE: &str = "SENTINEL-MSG-7f3a";
const KEY: &str = "sk-SENTINEL-KEY-91c2";
const REPLY: &str = "SENTINEL-REPLY-55d0";
const UPSTREAM: &str = "SENTINEL-UPSTREAM-0c4d";
const PROBE: &str = "SENTINEL-PROBE";

/// Every sentinel, and the distinctive parts a partial leak would show.
const FORBIDDEN: &[&str] = &[
    MESSAGE,
    "MSG-7f3a",
    KEY,
    "SENTINEL-KEY",
    "KEY-91c2",
    REPLY,
    "REPLY-55d0",
    UPSTREAM,
    "UPSTREAM-0c4d",
];

fn chat_body() -> Value {
    json!({"messages": [
        {"role": "system", "content": format!("You are helpful. {MESSAGE}")},
        {"role": "user", "content": format!("My secret is {MESSAGE}")},
    ]})
}

async fn post(app: &TestApp, body: &Value) -> (u16, Value) {
    let response = app.post_chat(body.to_string()).await;
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON answer"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_success_and_provider_failures_log_no_contents_keys_or_replies() {
    let capture = logs::capture();
    tracing::info!(probe = PROBE, "capture check");

    let app = spawn_app(&[("OPENAI_API_KEY", KEY)]).await;

    // Success: the contents go to the provider, the reply comes back.
    app.openai.script([Behaviour::complete(REPLY)]);
    let (status, body) = post(&app, &chat_body()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["message"]["content"], REPLY);
    let received = app.openai.received();
    assert_eq!(
        received[0].authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str()),
        "the key was in use"
    );
    assert!(
        received[0].body.to_string().contains(MESSAGE),
        "the contents reached the provider"
    );

    // Provider 500 twice (retried), then a quota error, then errors whose bodies echo data.
    app.openai
        .script([Behaviour::server_error(), Behaviour::server_error()]);
    let (status, body) = post(&app, &chat_body()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (500, Some("PROVIDER_ERROR"))
    );

    app.openai.script([Behaviour::insufficient_quota()]);
    let (status, body) = post(&app, &chat_body()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (500, Some("INSUFFICIENT_CREDITS"))
    );

    let echoing = json!({"error": {
        "message": format!("Incorrect API key provided: {KEY}. {UPSTREAM} {MESSAGE}"),
        "type": "invalid_request_error", "code": "invalid_api_key"}})
    .to_string();
    app.openai.script([Behaviour::Raw {
        status: 401,
        body: echoing.clone(),
    }]);
    let (status, body) = post(&app, &chat_body()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (500, Some("PROVIDER_ERROR"))
    );

    app.openai.script([Behaviour::Raw {
        status: 200,
        body: format!("<html>{UPSTREAM} {MESSAGE}</html>"),
    }]);
    let (status, body) = post(&app, &chat_body()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (500, Some("PROVIDER_BAD_RESPONSE"))
    );

    assert_eq!(app.events.published().len(), 4, "one notification per 500");

    // Positive controls: the capture works and holds the access log of this run.
    capture.assert_line("the probe line", &[("probe", json!(PROBE))]);
    capture.assert_line(
        "the access log line of the 200",
        &[("route", json!("/api/chat")), ("status", json!(200))],
    );
    capture.assert_refusal_logged("/api/chat", 500, "INSUFFICIENT_CREDITS");

    capture.assert_none_of(FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_requests_log_no_contents() {
    let capture = logs::capture();
    let app = spawn_app(&[("OPENAI_API_KEY", KEY)]).await;

    let invalid = [
        // A bad role next to a sentinel content.
        json!({"messages": [{"role": "bot", "content": MESSAGE}]}).to_string(),
        // A sentinel in a field that is not allowed to hold it.
        json!({"messages": [{"role": "user", "content": "hi"}], "model": MESSAGE}).to_string(),
        json!({"messages": [{"role": "user", "content": MESSAGE}], "maxTokens": MESSAGE})
            .to_string(),
        json!({"messages": [{"role": MESSAGE, "content": MESSAGE}]}).to_string(),
        // Content over the limit, made of the sentinel.
        json!({"messages": [{"role": "user", "content": MESSAGE.repeat(1000)}]}).to_string(),
        // Malformed JSON right after the sentinel.
        format!(r#"{{"messages": [{{"role": "user", "content": "{MESSAGE}" ,,]"#),
        // Over the size cap.
        json!({"messages": [{"role": "user", "content": MESSAGE.repeat(5000)}]}).to_string(),
    ];
    for body in invalid {
        let response = app.post_chat(body.clone()).await;
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        assert_eq!(status, 400, "{text} for {:.120}", body);
        assert!(
            !text.contains(MESSAGE),
            "the error message names the field, not its value: {text}"
        );
    }
    assert_eq!(app.openai.request_count(), 0);

    capture.assert_refusal_logged("/api/chat", 400, "INVALID_REQUEST");
    capture.assert_none_of(FORBIDDEN);
}

/// Reads a streamed answer to its end, as text.
async fn post_streamed(app: &TestApp, body: &Value) -> String {
    let response = app.post_chat_stream(body.to_string()).await;
    assert_eq!(response.status().as_u16(), 200);
    response.text().await.expect("the stream reads to its end")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_chat_logs_no_contents_keys_or_replies() {
    let capture = logs::capture();
    let app = spawn_app(&[("OPENAI_API_KEY", KEY)]).await;
    let reply = format!("First {REPLY}. Second {REPLY}！\nThird {REPLY}?");
    let pace = Pace {
        first_token: Duration::from_millis(10),
        tokens_per_second: 500.0,
    };

    app.openai
        .script([Behaviour::streamed(reply.clone(), pace)]);
    let events = post_streamed(&app, &chat_body()).await;
    assert!(events.contains("event: done"), "{events}");
    assert!(events.contains(REPLY), "the reply reached the client");

    app.openai
        .script([Behaviour::streamed_failing(reply, pace, 6)]);
    let events = post_streamed(&app, &chat_body()).await;
    assert!(events.contains("event: error"), "{events}");
    assert_eq!(app.events.published().len(), 1, "the failure was notified");

    for (code, ended) in [(Value::Null, "done"), (json!("PROVIDER_ERROR"), "error")] {
        capture.assert_line(
            &format!("the access log line of the stream that ended in {ended}"),
            &[
                ("route", json!("/api/chat")),
                ("status", json!(200)),
                ("streamed", json!(true)),
                ("code", code),
            ],
        );
    }
    capture.assert_none_of(FORBIDDEN);
}
