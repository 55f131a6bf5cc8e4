//! A handler that panics (a bug) answers that request 500 `INTERNAL_ERROR` with the error body and
//! its notification, the process goes on serving, and the log holds where it panicked but not the
//! panic's message (which may quote input). Its own test binary: it installs the production panic
//! hook, which would hide other tests' assertion messages.

use std::sync::Arc;

use async_trait::async_trait;
use koe::model::{ModelProvider, ModelReply, ModelRequest, ProviderError};
use koe_testkit::harness::spawn_app_with;
use koe_testkit::logs;
use serde_json::{Value, json};

const SECRET: &str = "SENTINEL-PANIC-QUOTES-INPUT-5e1a";

/// A model adapter with a bug: it panics with the user's message in its text.
struct PanickingModel;

#[async_trait]
impl ModelProvider for PanickingModel {
    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, ProviderError> {
        let text = request.messages.last().map(|m| m.content.clone());
        panic!("bug while handling {text:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_a_500_with_its_location_logged_not_its_message() {
    let capture = logs::capture();
    koe::platform::telemetry::install_panic_hook();
    let app = spawn_app_with(&[("OPENAI_API_KEY", "sk-test")], |app| {
        app.with_model(Arc::new(PanickingModel))
    })
    .await;
    let body = json!({"messages": [{"role": "user", "content": format!("hello {SECRET}")}]});
    for attempt in 0..2 {
        let response = app.post_chat(body.to_string()).await;
        assert_eq!(response.status().as_u16(), 500, "attempt {attempt}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["code"], "INTERNAL_ERROR", "{answer}");
        assert_eq!(answer["error"], answer["message"]);
    }
    // The process still serves (the same server, another route).
    let health = app.get("/health").await;
    assert_eq!(health.status().as_u16(), 200);

    let published = app.events.published();
    assert_eq!(
        published.len(),
        2,
        "one notification per 500: {published:?}"
    );
    assert!(published.iter().all(|n| n.code == "INTERNAL_ERROR"));

    let contents = capture.contents();
    assert!(
        contents.contains("tests/panic_privacy.rs:"),
        "the panic's location is logged:\n{contents}"
    );
    assert!(
        !contents.contains(SECRET),
        "the panic's message leaked:\n{contents}"
    );
    assert!(!contents.contains("bug while handling"), "{contents}");
}
