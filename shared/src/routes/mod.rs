//! Routes: each endpoint's one definition (its route, body cap, authentication, the ports it needs and
//! its handler), and the list of them that the local server, the tests and the contract files
//! are held to.
//!
//! Adding an endpoint: a unit struct with an `impl Endpoint` (here, in the file of its API), its
//! name in [`routes!`] below, a one-line bin in `functions/src/bin/`, a `ports::Ports` impl if
//! its ports are new (and an `Adapters` accessor, implemented by `wiring::App`, if an adapter
//! is), and the function, route and fixture in `template.yaml`, `openapi.yaml` and `events/`
//! (`shared/tests/it/contract_files/` checks each of these against the list).

use std::future::Future;
use std::time::Duration;

use http::Method;

use crate::platform::error::ApiError;
use crate::platform::{Request, Response};

mod agent_api;
mod chat_api;
pub mod ports;

pub use agent_api::{
    Agent, AgentPorts, CallsPorts, CancelCall, ConfirmCall, ConfirmPorts, CreateCall, DevicePorts,
    Dispatch, DispatchPorts, GetCall, PutDevice,
};
pub use chat_api::{
    Chat, ChatPorts, ChatStream, ChatStreamPorts, ErrorTest, Health, Info, InfoPorts, NoPorts,
};
pub use ports::{Adapters, Ports};

/// One endpoint: what a Lambda runs and what the local server routes to.
///
/// `Ports` are the adapters its handler talks to, as typed fields: a handler cannot reach a port
/// its endpoint did not ask for, and a function whose ports cannot be built does not start.
pub trait Endpoint: Send + Sync + 'static {
    const ROUTE: Route;
    type Ports: Ports;

    fn handle(
        ports: &Self::Ports,
        request: Request,
    ) -> impl Future<Output = Result<Response, ApiError>> + Send;
}

/// The two public bases: `{base_url}` (chat, no auth) and `{agent_url}` (agent, `X-Api-Key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    Chat,
    Agent,
}

impl Api {
    /// The logical id of the API's `AWS::Serverless::HttpApi` in `template.yaml`.
    pub fn template_id(self) -> &'static str {
        match self {
            Api::Chat => "ChatApi",
            Api::Agent => "AgentApi",
        }
    }
}

/// How a request proves who sent it; checked before a byte of the body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    None,
    /// `X-Api-Key`, one of `AGENT_API_KEYS`.
    ApiKey,
    /// `Authorization: Bearer <OIDC ID token>`: its presence here, the token in the handler.
    Bearer,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub api: Api,
    pub method: Method,
    pub path: &'static str,
    /// The function's logical id in `template.yaml`.
    pub function: &'static str,
    /// The binary in `functions/` that runs this endpoint as a Lambda.
    pub binary: &'static str,
    /// Largest request body accepted, in bytes.
    pub body_limit: usize,
    /// The function's `Timeout` in `template.yaml` (held to it by `contract_files`): the
    /// deadline of a request where no Lambda context gives one (koe-local, tests).
    pub timeout: Duration,
    pub auth: Auth,
}

/// Worst-case bytes of one string character in a body we size for: UTF-8 is at most 4, and
/// JSON's mandatory escapes of control characters (`\u001f`) are 6.
pub const JSON_BYTES_PER_CHAR: usize = 6;
/// Room for what the formulas below leave out (number forms such as `4096.0`, whitespace).
const BODY_SLACK: usize = 1024;

/// A JSON string of at most `chars` characters, quotes included.
const fn json_str(chars: usize) -> usize {
    2 + chars * JSON_BYTES_PER_CHAR
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

/// Body cap of `POST /agent`, derived as [`CHAT_BODY_LIMIT`] is. Round 2 is the larger round:
/// the message, `MAX_STEPS` results of `MAX_EVENTS` events (title, start, end, allDay), the
/// device and the time zone. Round 1 (message, capabilities, deviceId, timezone) is far smaller;
/// repeated or unknown capabilities count as unknown fields.
///
/// ```text
/// 51 + (2 + 4000 x 6) + 5 x (54 + (2 + 64 x 6) + 200 x (42 + (2 + 200 x 6) + 2 x (2 + 35 x 6)))
///   + (2 + 128 x 6) + (2 + 32 x 6) + 1024 = 1 696 234 bytes (about 1.6 MiB)
/// ```
pub const AGENT_BODY_LIMIT: usize = {
    use crate::domain::agent::{
        MAX_DATETIME_CHARS, MAX_EVENTS, MAX_MESSAGE_CHARS, MAX_STEP_ID_CHARS, MAX_STEPS,
        MAX_TIMEZONE_CHARS, MAX_TITLE_CHARS,
    };
    use crate::domain::device::MAX_DEVICE_ID_CHARS;
    let event = r#"{"title":,"start":,"end":,"allDay":false},"#.len()
        + json_str(MAX_TITLE_CHARS)
        + 2 * json_str(MAX_DATETIME_CHARS);
    let result = r#"{"stepId":,"tool":"calendar","output":{"events":[]}},"#.len()
        + json_str(MAX_STEP_ID_CHARS)
        + MAX_EVENTS * event;
    r#"{"message":,"results":[],"deviceId":,"timezone":}"#.len()
        + json_str(MAX_MESSAGE_CHARS)
        + MAX_STEPS * result
        + json_str(MAX_DEVICE_ID_CHARS)
        + json_str(MAX_TIMEZONE_CHARS)
        + BODY_SLACK
};

/// Lambda's 6 MB request payload limit binds before API Gateway's 10 MB: the event that carries
/// the body writes it again as a JSON string (each `"` and `\` doubled), so a body of up to
/// 3 MB always fits in the event.
const _: () = assert!(CHAT_BODY_LIMIT <= 3_000_000 && AGENT_BODY_LIMIT <= 3_000_000);
/// Body cap of every other endpoint.
pub const SMALL_BODY_LIMIT: usize = 8 * 1024;

/// The list of endpoints. It makes [`ROUTES`] and [`each`]; both follow this order.
macro_rules! routes {
    ($($endpoint:ident),+ $(,)?) => {
        /// Every route, in the list's order.
        pub static ROUTES: &[Route] = &[$(<$endpoint as Endpoint>::ROUTE),+];

        /// Calls `visit` once per endpoint, with the endpoint as a type (the local server builds
        /// a service of each; tests visit them all).
        pub fn each<V: Visit>(visit: &mut V) {
            $(visit.visit::<$endpoint>();)+
        }
    };
}

routes!(
    Chat,
    Info,
    Health,
    ErrorTest,
    Agent,
    PutDevice,
    CreateCall,
    GetCall,
    CancelCall,
    ConfirmCall,
    Dispatch,
);

/// An endpoint of the route table served streamed by a function of its own, behind that
/// function's Lambda function URL with `InvokeMode: RESPONSE_STREAM` (API Gateway HTTP APIs
/// cannot stream). The function answers the route's method and path only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamedFunction {
    /// The route (method, path, body cap) with the streaming function's id and binary.
    pub route: Route,
    /// What the binary's `main` runs.
    pub entrypoint: &'static str,
}

/// Every streamed function: POST /api/chat with `Accept: text/event-stream` ([`ChatStream`]).
pub static STREAMED: &[StreamedFunction] = &[StreamedFunction {
    route: <ChatStream as Endpoint>::ROUTE,
    entrypoint: "koe::lambda::chat_stream::run()",
}];

/// What [`each`] calls for every endpoint type.
pub trait Visit {
    fn visit<E: Endpoint>(&mut self);
}

/// Why a request matched no route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteMiss {
    NotFound,
    /// The path exists with other methods.
    MethodNotAllowed(Vec<Method>),
}

pub fn find(api: Api, method: &Method, path: &str) -> Result<&'static Route, RouteMiss> {
    let on_path: Vec<&Route> = ROUTES
        .iter()
        .filter(|r| r.api == api && r.path == path)
        .collect();
    if let Some(route) = on_path.iter().find(|r| r.method == method) {
        return Ok(route);
    }
    if on_path.is_empty() {
        Err(RouteMiss::NotFound)
    } else {
        Err(RouteMiss::MethodNotAllowed(
            on_path.iter().map(|r| r.method.clone()).collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_unique_per_api_method_and_path_and_binary() {
        let mut seen = std::collections::HashSet::new();
        let mut binaries = std::collections::HashSet::new();
        for r in ROUTES {
            assert!(seen.insert((r.api, r.method.clone(), r.path)), "{r:?}");
            assert!(binaries.insert(r.binary), "binary {} twice", r.binary);
        }
    }

    #[test]
    fn streamed_functions_serve_a_route_of_the_table_as_it_is() {
        for streamed in STREAMED {
            let route = &streamed.route;
            let table = find(route.api, &route.method, route.path).unwrap();
            assert_eq!(
                (table.body_limit, table.auth),
                (route.body_limit, route.auth)
            );
            assert_ne!(table.binary, route.binary, "a function of its own");
        }
    }

    #[test]
    fn the_body_caps_are_the_documented_figures() {
        assert_eq!(CHAT_BODY_LIMIT, 772_478);
        assert_eq!(AGENT_BODY_LIMIT, 1_696_234);
    }

    #[test]
    fn misses_tell_not_found_from_wrong_method() {
        assert_eq!(
            find(Api::Chat, &Method::GET, "/nope"),
            Err(RouteMiss::NotFound)
        );
        assert_eq!(
            find(Api::Chat, &Method::DELETE, "/health"),
            Err(RouteMiss::MethodNotAllowed(vec![Method::GET]))
        );
        assert_eq!(
            find(Api::Agent, &Method::GET, "/health"),
            Err(RouteMiss::NotFound)
        );
        assert_eq!(
            find(Api::Chat, &Method::POST, "/api/chat").unwrap().binary,
            "chat"
        );
    }
}
