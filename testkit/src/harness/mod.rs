//! `spawn_app`: the app on free loopback ports, configured from variables, with a stand-in
//! OpenAI and a recording event bus, behind the front `KOE_TEST_FRONT` names ([`front`]): the
//! real local server (`local`, the default) or API Gateway and lambda_http (`lambda`,
//! [`crate::gateway`]).
//!
//! `spawn_app_with` lets a test swap ports of the `App` before it starts (a `ManualClock`, a
//! failing or DynamoDB-backed store); the `TestApp` keeps the store and clock the server really
//! uses, so a test can drive state directly (e.g. claim a reservation) and read it back.

use std::sync::Arc;

use chrono::Utc;
use koe::App;
use koe::app::ports::Adapters;
use koe::domain::device::{Device, DeviceId};
use koe::platform::clock::Clock;
use koe::platform::config::Vars;
use koe::platform::metrics::MemorySink;
use koe::push::PushSender;
use koe::store::Store;

use crate::events::RecordingEventBus;
use crate::function_url::FunctionUrl;
use crate::gateway::Gateway;
use crate::openai::StandInOpenAi;
use koe_local::{LocalConfig, Running};

/// What the tests' requests go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    /// koe-local: axum, the route table, each endpoint's service.
    Local,
    /// A stand-in API Gateway HTTP API, payload v2 events, lambda_http and the Lambda
    /// glue (`koe::app::lambda`), as deployed ([`crate::gateway`]).
    Lambda,
}

/// The front from `KOE_TEST_FRONT`: `local` (or unset) or `lambda`; anything else stops the
/// test, so that a misspelt front does not quietly test the default one.
pub fn front() -> Front {
    match std::env::var("KOE_TEST_FRONT").as_deref() {
        Err(std::env::VarError::NotPresent) | Ok("local") | Ok("") => Front::Local,
        Ok("lambda") => Front::Lambda,
        other => panic!("KOE_TEST_FRONT must be local or lambda, not {other:?}"),
    }
}

/// What serves a `TestApp`.
enum Serving {
    Local { _running: Running },
    // The function URL is only held: dropping it stops it.
    Lambda(Gateway, #[allow(dead_code)] FunctionUrl),
}

/// The agent API key every test app accepts unless `AGENT_API_KEYS` is overridden.
pub const TEST_API_KEY: &str = "test-key-0123456789";
/// The step-id signing key (`AGENT_STEP_KEY`) of every test app unless overridden.
pub const TEST_STEP_KEY: &str = "test-step-key-0123456789-abcdefghij";

pub struct TestApp {
    pub chat_url: String,
    /// Where POST /api/chat streams: koe-local's chat API, or (lambda front) the chat-stream
    /// function's URL (deployed: `ChatStreamUrl`; the HTTP APIs cannot stream).
    pub chat_stream_url: String,
    pub agent_url: String,
    pub openai: StandInOpenAi,
    pub events: Arc<RecordingEventBus>,
    /// The store the server uses.
    pub store: Arc<dyn Store>,
    /// The clock the server uses.
    pub clock: Arc<dyn Clock>,
    /// The push sender the server's dispatcher uses.
    pub push: Arc<dyn PushSender>,
    pub client: reqwest::Client,
    /// Every EMF line the app wrote (its metrics; none reach stdout).
    pub metrics: MemorySink,
    serving: Serving,
}

/// Starts the app with `OPENAI_BASE_URL` on a fresh stand-in, `OPENAI_API_KEY` set,
/// `AGENT_API_KEYS` = [`TEST_API_KEY`] and the in-process dispatcher off
/// (`LOCAL_DISPATCHER=false`: tests drive reservations themselves), plus `vars` (which win over
/// those).
pub async fn spawn_app(vars: &[(&str, &str)]) -> TestApp {
    spawn_app_with(vars, |app| app).await
}

/// `spawn_app`, with `customize` applied to the `App` (after the recording event bus is set)
/// before it starts serving: e.g. `|app| app.with_clock(clock.clone())`.
pub async fn spawn_app_with(vars: &[(&str, &str)], customize: impl FnOnce(App) -> App) -> TestApp {
    spawn_app_on(front(), vars, customize).await
}

/// `spawn_app_with` on fresh DynamoDB Local tables and a manual clock at `now` (RFC 3339).
pub async fn spawn_app_on_dynamodb(vars: &[(&str, &str)], now: &str) -> TestApp {
    let store = Arc::new(crate::dynamodb::fresh_store().await);
    let clock = Arc::new(crate::clock::ManualClock::at_rfc3339(now));
    spawn_app_with(vars, |app| app.with_clock(clock).with_store(store)).await
}

/// `spawn_app_with` behind the front given, whatever `KOE_TEST_FRONT` says (tests of a front).
pub async fn spawn_app_on(
    front: Front,
    vars: &[(&str, &str)],
    customize: impl FnOnce(App) -> App,
) -> TestApp {
    let openai = StandInOpenAi::start().await;
    let base_url = openai.base_url();
    let mut all: Vec<(&str, &str)> = vec![
        ("OPENAI_BASE_URL", &base_url),
        ("OPENAI_API_KEY", "sk-test-key"),
        ("AGENT_API_KEYS", TEST_API_KEY),
        ("AGENT_STEP_KEY", TEST_STEP_KEY),
        ("CHAT_ADDR", "127.0.0.1:0"),
        ("AGENT_ADDR", "127.0.0.1:0"),
        ("LOCAL_DISPATCHER", "false"),
    ];
    all.extend_from_slice(vars);
    let vars = Vars::from_pairs(&all);
    let local_config = LocalConfig::from_vars(&vars).expect("test addresses are valid");
    let events = Arc::new(RecordingEventBus::default());
    let metrics = MemorySink::default();
    let app = customize(
        App::local(vars)
            .with_events(events.clone())
            .with_metrics(Arc::new(metrics.clone())),
    );
    app.check_config().expect("test configuration is valid");
    let store = app.store().await.expect("the store builds");
    let clock = app.clock();
    let push = app.push().expect("the push sender builds");
    let (chat_addr, agent_addr, stream_addr, serving) = match front {
        Front::Local => {
            let running = koe_local::start(app, &local_config)
                .await
                .expect("local server starts");
            (
                running.chat_addr,
                running.agent_addr,
                running.chat_addr,
                Serving::Local { _running: running },
            )
        }
        Front::Lambda => {
            // The dispatcher loop is koe-local's; behind the gateway, runs are the tests' own.
            assert!(
                !local_config.dispatcher,
                "LOCAL_DISPATCHER=true has no loop to run under the lambda front"
            );
            let url = crate::function_url::start(&app)
                .await
                .expect("function URL starts");
            let gateway = crate::gateway::start(app).await.expect("gateway starts");
            (
                gateway.chat_addr,
                gateway.agent_addr,
                url.addr,
                Serving::Lambda(gateway, url),
            )
        }
    };
    TestApp {
        chat_url: format!("http://{chat_addr}"),
        chat_stream_url: format!("http://{stream_addr}"),
        agent_url: format!("http://{agent_addr}"),
        openai,
        events,
        store,
        clock,
        push,
        client: reqwest::Client::new(),
        metrics,
        serving,
    }
}

impl TestApp {
    /// The device record the app's store holds for `device` at the wall clock's now, if any.
    pub async fn stored_device(&self, device: &str) -> Option<Device> {
        let id = DeviceId::parse("deviceId", device).expect("a valid device id");
        self.store
            .get_device(&id, Utc::now())
            .await
            .expect("the store answers")
    }

    /// The app's EMF lines so far, parsed.
    pub fn metric_lines(&self) -> Vec<serde_json::Value> {
        self.metrics
            .lines()
            .iter()
            .map(|l| serde_json::from_str(l).expect("an EMF line is JSON"))
            .collect()
    }

    /// The front this app is served through.
    pub fn front(&self) -> Front {
        match self.serving {
            Serving::Local { .. } => Front::Local,
            Serving::Lambda(..) => Front::Lambda,
        }
    }

    /// The payload v2 events the gateway front sent to functions, in order (none under the
    /// local front).
    pub fn gateway_events(&self) -> Vec<serde_json::Value> {
        match &self.serving {
            Serving::Local { .. } => Vec::new(),
            Serving::Lambda(gateway, _) => gateway.events(),
        }
    }

    pub async fn post_chat(&self, body: impl Into<reqwest::Body>) -> reqwest::Response {
        self.client
            .post(format!("{}/api/chat", self.chat_url))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request reaches the app")
    }

    /// POST /api/chat with `Accept: text/event-stream`, where the front streams it.
    pub async fn post_chat_stream(&self, body: impl Into<reqwest::Body>) -> reqwest::Response {
        self.client
            .post(format!("{}/api/chat", self.chat_stream_url))
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(body)
            .send()
            .await
            .expect("request reaches the app")
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(format!("{}{path}", self.chat_url))
            .send()
            .await
            .expect("request reaches the app")
    }

    /// A request to the agent API (`path` may carry a query) without any `X-Api-Key`.
    pub fn agent_unauthenticated(
        &self,
        method: http::Method,
        path: &str,
    ) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.agent_url))
            .header("content-type", "application/json")
    }

    /// A request to the agent API with `X-Api-Key: key`.
    pub fn agent_with_key(
        &self,
        method: http::Method,
        path: &str,
        key: &str,
    ) -> reqwest::RequestBuilder {
        self.agent_unauthenticated(method, path)
            .header("x-api-key", key)
    }

    /// `PUT /devices` for `device` with `token`, presenting `secret` if given; asserts the 200
    /// and returns its body.
    pub async fn put_device(
        &self,
        device: &str,
        token: &str,
        secret: Option<&str>,
    ) -> serde_json::Value {
        let body = serde_json::json!({"deviceId": device, "voipToken": token});
        let request = self
            .agent(http::Method::PUT, "/devices")
            .body(body.to_string());
        let response = send_with_secret(request, secret).await;
        assert_eq!(response.status().as_u16(), 200, "PUT /devices for {device}");
        response.json().await.expect("a JSON answer")
    }

    /// Registers `device` with `token`; returns the secret it was issued (not yet proven).
    pub async fn register_device(&self, device: &str, token: &str) -> String {
        let issued = self.put_device(device, token, None).await;
        let secret = issued["deviceSecret"].as_str();
        secret.expect("a new device gets its secret").to_owned()
    }

    /// Registers `device` and proves its secret (a `PUT /devices` presenting it): from now on
    /// every request for the device needs it. Returns the secret.
    pub async fn register_proven_device(&self, device: &str, token: &str) -> String {
        let secret = self.register_device(device, token).await;
        self.put_device(device, token, Some(&secret)).await;
        secret
    }

    /// `method` on `url` with no key and no body, as any client could send it.
    pub async fn bare(&self, method: http::Method, url: String) -> reqwest::Response {
        send(self.client.request(method, url)).await
    }

    /// `POST /agent` with `body`, with the test key.
    pub async fn post_agent(&self, body: &serde_json::Value) -> reqwest::Response {
        send(
            self.agent(http::Method::POST, "/agent")
                .body(body.to_string()),
        )
        .await
    }

    /// A request to the agent API with the test key ([`TEST_API_KEY`]).
    pub fn agent(&self, method: http::Method, path: &str) -> reqwest::RequestBuilder {
        self.agent_with_key(method, path, TEST_API_KEY)
    }
}

/// `app` on `store` when one is given, else on the store it has (the in-memory one).
pub fn on_store(app: App, store: Option<Arc<dyn Store>>) -> App {
    match store {
        Some(store) => app.with_store(store),
        None => app,
    }
}
mod answers;
mod fakes;

pub use self::answers::{
    error_body, error_message, gateway_error, header, invalid_field, route_miss, send,
    send_with_secret, strings_of,
};
pub use self::fakes::{FailingStore, issued_step_id, issued_step_ids_with, tool_results};
