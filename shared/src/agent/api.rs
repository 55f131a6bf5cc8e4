//! POST /agent's definition: its route, body cap and ports, and its handler's call.

use std::sync::Arc;
use std::time::Duration;

use http::Method;

use crate::agent::binding::StepSigner;
use crate::domain::agent::MAX_DATETIME_CHARS;
use crate::domain::agent::tools::{Kind, TOOLS, Tool};
use crate::model::ModelProvider;
use crate::platform::clock::Clock;
use crate::platform::config::AgentConfig;
use crate::platform::endpoint::{Api, BODY_SLACK, Endpoint, FixtureAnswer, Route, json_str};
use crate::platform::error::ApiError;
use crate::platform::{Request, Response};
use crate::store::prelude::*;

/// This feature's endpoints in the route table (`app` lists the features).
pub type Endpoints = (Agent,);

/// Body cap of `POST /agent`, derived as [`CHAT_BODY_LIMIT`] is. Round 2 is the larger round:
/// the message, `MAX_STEPS` results of the largest tool output (its `max_items` items, each
/// field at its cap), the device and the time zone. Round 1 (message, capabilities, deviceId,
/// timezone) is far smaller; repeated or unknown capabilities count as unknown fields. With
/// `calendar` (200 events: title, start, end, allDay) the largest:
///
/// ```text
/// 51 + (2 + 4000 x 6) + 5 x (54 + (2 + 64 x 6) + 200 x (42 + (2 + 200 x 6) + 2 x (2 + 35 x 6)))
///   + (2 + 128 x 6) + (2 + 32 x 6) + 1024 = 1 696 234 bytes (about 1.6 MiB)
/// ```
pub const AGENT_BODY_LIMIT: usize = {
    use crate::domain::agent::{MAX_MESSAGE_CHARS, MAX_STEPS, MAX_TIMEZONE_CHARS};
    use crate::domain::device::MAX_DEVICE_ID_CHARS;
    let mut largest = 0;
    let mut i = 0;
    while i < TOOLS.len() {
        let size = result_bytes(TOOLS[i]);
        if size > largest {
            largest = size;
        }
        i += 1;
    }
    r#"{"message":,"results":[],"deviceId":,"timezone":}"#.len()
        + json_str(MAX_MESSAGE_CHARS)
        + MAX_STEPS * largest
        + json_str(MAX_DEVICE_ID_CHARS)
        + json_str(MAX_TIMEZONE_CHARS)
        + BODY_SLACK
};

/// One result of `tool` at its caps, compact, with its trailing comma:
/// `{"stepId":,"tool":"<name>","output":{"<list>":[]}},` with the id and `max_items` items.
const fn result_bytes(tool: &Tool) -> usize {
    use crate::domain::agent::MAX_STEP_ID_CHARS;
    // `{"f1":v1,"f2":v2},`: braces, comma, and per field its quoted name, colon and comma (one
    // comma too many, the last field's, is the item's trailing one).
    let mut item = 2;
    let mut i = 0;
    while i < tool.item.len() {
        let field = &tool.item[i];
        item += field.name.len() + 4;
        let value = match field.kind {
            Kind::Text(max) => json_str(max),
            Kind::DateTime => json_str(MAX_DATETIME_CHARS),
            Kind::Bool => "false".len(),
        };
        // An optional field may be `null`.
        item += if value < "null".len() {
            "null".len()
        } else {
            value
        };
        i += 1;
    }
    r#"{"stepId":,"tool":"","output":{"":[]}},"#.len()
        + tool.name.len()
        + tool.list.len()
        + json_str(MAX_STEP_ID_CHARS)
        + tool.max_items * item
}

pub struct AgentPorts {
    pub model: Arc<dyn ModelProvider>,
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub settings: AgentConfig,
    /// Total time for one round's provider work.
    pub budget: Duration,
    /// Signs round 1's step ids and checks round 2's.
    pub signer: StepSigner,
}

/// POST /agent: round 1 (plan or answer) or round 2 (answer from the device's tool results).
pub struct Agent;

impl Endpoint for Agent {
    const ROUTE: Route = Route::new(
        Api::Agent,
        Method::POST,
        "/agent",
        "AgentFunction",
        "agent",
        28,
        FixtureAnswer {
            status: 200,
            holds: r#""type":"plan""#,
        },
    )
    .with_body_limit(AGENT_BODY_LIMIT);
    type Ports = AgentPorts;

    async fn handle(ports: &AgentPorts, request: Request) -> Result<Response, ApiError> {
        let cx = crate::agent::handler::AgentContext {
            model: ports.model.as_ref(),
            store: ports.store.as_ref(),
            now: ports.clock.now(),
            settings: &ports.settings,
            budget: ports.budget,
            signer: &ports.signer,
        };
        crate::agent::handler::agent(&cx, request).await
    }
}
