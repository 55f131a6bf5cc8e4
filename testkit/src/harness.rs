//! `spawn_app`: the real local server on free loopback ports, configured from variables, with a
//! stand-in OpenAI and a recording event bus.

use std::sync::Arc;

use koe::config::{Config, Vars};
use koe::entrypoints::local::{self, LocalConfig, Running};

use crate::events::RecordingEventBus;
use crate::openai::StandInOpenAi;

pub struct TestApp {
    pub chat_url: String,
    pub agent_url: String,
    pub openai: StandInOpenAi,
    pub events: Arc<RecordingEventBus>,
    pub client: reqwest::Client,
    _running: Running,
}

/// Starts the app with `OPENAI_BASE_URL` on a fresh stand-in and `OPENAI_API_KEY` set, plus
/// `vars` (which win over those two).
pub async fn spawn_app(vars: &[(&str, &str)]) -> TestApp {
    let openai = StandInOpenAi::start().await;
    let base_url = openai.base_url();
    let mut all: Vec<(&str, &str)> = vec![
        ("OPENAI_BASE_URL", &base_url),
        ("OPENAI_API_KEY", "sk-test-key"),
        ("CHAT_ADDR", "127.0.0.1:0"),
        ("AGENT_ADDR", "127.0.0.1:0"),
    ];
    all.extend_from_slice(vars);
    let vars = Vars::from_pairs(&all);
    let config = Config::from_vars(&vars).expect("test configuration is valid");
    let local_config = LocalConfig::from_vars(&vars).expect("test addresses are valid");
    let events = Arc::new(RecordingEventBus::default());
    let app = koe::App::from_config(config).with_events(events.clone());
    let running = local::start(Arc::new(app), &local_config)
        .await
        .expect("local server starts");
    TestApp {
        chat_url: format!("http://{}", running.chat_addr),
        agent_url: format!("http://{}", running.agent_addr),
        openai,
        events,
        client: reqwest::Client::new(),
        _running: running,
    }
}

impl TestApp {
    pub async fn post_chat(&self, body: impl Into<reqwest::Body>) -> reqwest::Response {
        self.client
            .post(format!("{}/api/chat", self.chat_url))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request reaches koe-local")
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(format!("{}{path}", self.chat_url))
            .send()
            .await
            .expect("request reaches koe-local")
    }
}

/// Asserts the contract's error body and returns it.
pub async fn error_body(response: reqwest::Response, status: u16, code: &str) -> serde_json::Value {
    assert_eq!(response.status().as_u16(), status, "status");
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "content-type"
    );
    let body: serde_json::Value = response.json().await.expect("error body is JSON");
    assert_eq!(body["code"], code, "code in {body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "message in {body}"
    );
    assert_eq!(
        body["error"], body["message"],
        "error mirrors message in {body}"
    );
    body
}
