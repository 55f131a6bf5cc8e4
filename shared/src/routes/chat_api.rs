//! The chat API's endpoints (`{base_url}`, no authentication): health, info, the error test, chat.

use std::sync::Arc;
use std::time::Duration;

use http::Method;

use super::ports::{Adapters, Ports};
use super::{Api, Auth, CHAT_BODY_LIMIT, Endpoint, Route, SMALL_BODY_LIMIT};
use crate::model::{ModelProvider, StreamingModel};
use crate::platform::config::{ConfigError, InfoConfig};
use crate::platform::error::ApiError;
use crate::platform::{Request, Response};
use crate::spend_guard::{GuardedModel, GuardedStream, SpendApi, SpendGuard};

/// The ports of an endpoint that talks to none.
pub struct NoPorts;

pub struct InfoPorts {
    pub info: InfoConfig,
}

pub struct ChatPorts {
    pub model: Arc<dyn ModelProvider>,
    /// Total time for the completion and its spend counters.
    pub budget: std::time::Duration,
}

/// The streamed chat's ports: the same provider, as a completion (for a request that does not
/// ask for events) and as a stream, both counted against chat's daily token ceiling.
pub struct ChatStreamPorts {
    pub model: Arc<dyn ModelProvider>,
    pub stream: Arc<dyn StreamingModel>,
    /// Total time for a JSON completion and its spend counters.
    pub budget: std::time::Duration,
}

impl Ports for ChatStreamPorts {
    async fn build(adapters: &impl Adapters) -> Result<Self, ConfigError> {
        let ceiling = adapters.spend_settings()?.chat_daily_tokens;
        let (store, clock) = (adapters.store().await?, adapters.clock());
        let metrics = adapters.metrics();
        let guard = || {
            SpendGuard::new(store.clone(), clock.clone(), SpendApi::Chat, ceiling)
                .measured_by(metrics.clone())
        };
        Ok(ChatStreamPorts {
            model: GuardedModel::wrap(adapters.model()?, guard()),
            stream: GuardedStream::wrap(adapters.streaming_model()?, guard()),
            budget: adapters.openai_settings()?.budget,
        })
    }
}

impl Ports for NoPorts {
    async fn build(_: &impl Adapters) -> Result<Self, ConfigError> {
        Ok(NoPorts)
    }
}

impl Ports for InfoPorts {
    async fn build(adapters: &impl Adapters) -> Result<Self, ConfigError> {
        Ok(InfoPorts {
            info: adapters.info_settings()?,
        })
    }
}

impl Ports for ChatPorts {
    async fn build(adapters: &impl Adapters) -> Result<Self, ConfigError> {
        let ceiling = adapters.spend_settings()?.chat_daily_tokens;
        Ok(ChatPorts {
            model: GuardedModel::wrap(
                adapters.model()?,
                SpendGuard::new(
                    adapters.store().await?,
                    adapters.clock(),
                    SpendApi::Chat,
                    ceiling,
                )
                .measured_by(adapters.metrics()),
            ),
            budget: adapters.openai_settings()?.budget,
        })
    }
}

const fn chat_route(
    method: Method,
    path: &'static str,
    function: &'static str,
    binary: &'static str,
    timeout_secs: u64,
) -> Route {
    Route {
        api: Api::Chat,
        method,
        path,
        function,
        binary,
        body_limit: SMALL_BODY_LIMIT,
        timeout: Duration::from_secs(timeout_secs),
        auth: Auth::None,
    }
}

/// GET /health.
pub struct Health;

impl Endpoint for Health {
    const ROUTE: Route = chat_route(Method::GET, "/health", "HealthFunction", "health", 5);
    type Ports = NoPorts;

    async fn handle(_: &NoPorts, _: Request) -> Result<Response, ApiError> {
        Ok(crate::chat::meta::health())
    }
}

/// GET /api/info.
pub struct Info;

impl Endpoint for Info {
    const ROUTE: Route = chat_route(Method::GET, "/api/info", "InfoFunction", "info", 5);
    type Ports = InfoPorts;

    async fn handle(ports: &InfoPorts, _: Request) -> Result<Response, ApiError> {
        Ok(crate::chat::meta::info(&ports.info))
    }
}

/// GET /api/error: fails on purpose, so the team can see notifications arrive.
pub struct ErrorTest;

impl Endpoint for ErrorTest {
    const ROUTE: Route = chat_route(
        Method::GET,
        "/api/error",
        "ErrorTestFunction",
        "error-test",
        5,
    );
    type Ports = NoPorts;

    async fn handle(_: &NoPorts, _: Request) -> Result<Response, ApiError> {
        Err(crate::chat::meta::error_test())
    }
}

/// POST /api/chat.
pub struct Chat;

impl Endpoint for Chat {
    const ROUTE: Route = Route {
        api: Api::Chat,
        method: Method::POST,
        path: "/api/chat",
        function: "ChatFunction",
        binary: "chat",
        body_limit: CHAT_BODY_LIMIT,
        timeout: Duration::from_secs(28),
        auth: Auth::None,
    };
    type Ports = ChatPorts;

    async fn handle(ports: &ChatPorts, request: Request) -> Result<Response, ApiError> {
        crate::chat::handler::chat(ports.model.as_ref(), ports.budget, request).await
    }
}

/// POST /api/chat as its streaming function serves it (`chat-stream`, behind a function URL:
/// see [`super::STREAMED`]): server-sent events with `Accept: text/event-stream`
/// (`Service<ChatStream>::handle_streaming`), else the same JSON answer as [`Chat`]. Not in the
/// route table: the route is `Chat`'s.
pub struct ChatStream;

impl Endpoint for ChatStream {
    const ROUTE: Route = Route {
        api: Api::Chat,
        method: Method::POST,
        path: "/api/chat",
        function: "ChatStreamFunction",
        binary: "chat-stream",
        body_limit: CHAT_BODY_LIMIT,
        timeout: Duration::from_secs(35),
        auth: Auth::None,
    };
    type Ports = ChatStreamPorts;

    async fn handle(ports: &ChatStreamPorts, request: Request) -> Result<Response, ApiError> {
        crate::chat::handler::chat(ports.model.as_ref(), ports.budget, request).await
    }
}
