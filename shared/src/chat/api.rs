//! The chat API's endpoints (`{base_url}`, no authentication): health, info, the error test, chat.

use std::sync::Arc;

use http::Method;

use crate::model::{ModelProvider, StreamingModel};
use crate::platform::config::InfoConfig;
use crate::platform::endpoint::{
    Api, BODY_SLACK, Endpoint, FixtureAnswer, JSON_BYTES_PER_CHAR, Route, json_str,
};
use crate::platform::error::ApiError;
use crate::platform::{Request, Response};

/// This feature's endpoints in the route table, in its order (`app` lists the features; the
/// streamed [`ChatStream`] has a function of its own, `app::STREAMED`).
pub type Endpoints = (Chat, Info, Health, ErrorTest);

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

/// Body cap of `POST /api/chat`, derived from the field caps the parser applies, so that every
/// body the field caps allow fits: compact JSON of the contract's fields (no unknown fields),
/// each string character counted at [`JSON_BYTES_PER_CHAR`] bytes, plus [`BODY_SLACK`]:
///
/// ```text
/// {"messages":[]  +  MAX_MESSAGES x {"role":"assistant","content":""},
///   +  MAX_TOTAL_CONTENT_CHARS x 6  +  ,"model":"gpt-4o-mini","maxTokens":4096}  +  slack
/// = 14 + 100 x 34 + 128 000 x 6 + 40 + 1024 = 772 478 bytes (about 0.74 MiB)
/// ```
pub const CHAT_BODY_LIMIT: usize = {
    use crate::domain::chat::{MAX_MESSAGES, MAX_TOTAL_CONTENT_CHARS};
    let message = r#"{"role":"assistant","content":}"#.len() + 1 + json_str(0);
    r#"{"messages":[]"#.len()
        + MAX_MESSAGES * message
        + MAX_TOTAL_CONTENT_CHARS * JSON_BYTES_PER_CHAR
        + r#","model":"gpt-4o-mini","maxTokens":4096}"#.len()
        + BODY_SLACK
};

/// GET /health.
pub struct Health;

impl Endpoint for Health {
    const ROUTE: Route = Route::new(
        Api::Chat,
        Method::GET,
        "/health",
        "HealthFunction",
        "health",
        5,
        FixtureAnswer {
            status: 200,
            holds: r#""status":"ok""#,
        },
    );
    type Ports = NoPorts;

    async fn handle(_: &NoPorts, _: Request) -> Result<Response, ApiError> {
        Ok(crate::chat::meta::health())
    }
}

/// GET /api/info.
pub struct Info;

impl Endpoint for Info {
    const ROUTE: Route = Route::new(
        Api::Chat,
        Method::GET,
        "/api/info",
        "InfoFunction",
        "info",
        5,
        FixtureAnswer {
            status: 200,
            holds: r#""minimumVersion":"1.0.0""#,
        },
    );
    type Ports = InfoPorts;

    async fn handle(ports: &InfoPorts, _: Request) -> Result<Response, ApiError> {
        Ok(crate::chat::meta::info(&ports.info))
    }
}

/// GET /api/error: fails on purpose, so the team can see notifications arrive.
pub struct ErrorTest;

impl Endpoint for ErrorTest {
    const ROUTE: Route = Route::new(
        Api::Chat,
        Method::GET,
        "/api/error",
        "ErrorTestFunction",
        "error-test",
        5,
        FixtureAnswer {
            status: 500,
            holds: r#""code":"TEST_ERROR""#,
        },
    );
    type Ports = NoPorts;

    async fn handle(_: &NoPorts, _: Request) -> Result<Response, ApiError> {
        Err(crate::chat::meta::error_test())
    }
}

/// POST /api/chat.
pub struct Chat;

impl Endpoint for Chat {
    const ROUTE: Route = Route::new(
        Api::Chat,
        Method::POST,
        "/api/chat",
        "ChatFunction",
        "chat",
        28,
        FixtureAnswer {
            status: 200,
            holds: r#""content":"フィクスチャの返事""#,
        },
    )
    .with_body_limit(CHAT_BODY_LIMIT);
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
    const ROUTE: Route = Route::new(
        Api::Chat,
        Method::POST,
        "/api/chat",
        "ChatStreamFunction",
        "chat-stream",
        35,
        FixtureAnswer {
            status: 200,
            holds: r#""content":"フィクスチャの返事""#,
        },
    )
    .with_body_limit(CHAT_BODY_LIMIT);
    type Ports = ChatStreamPorts;

    async fn handle(ports: &ChatStreamPorts, request: Request) -> Result<Response, ApiError> {
        crate::chat::handler::chat(ports.model.as_ref(), ports.budget, request).await
    }
}
