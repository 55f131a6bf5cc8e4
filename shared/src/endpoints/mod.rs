//! Endpoints: one definition each (its route, body cap, authentication, the ports it needs and
//! its handler), and the list of them that the local server, the tests and the contract files
//! are held to.
//!
//! Adding an endpoint: a unit struct with an `impl Endpoint` (here, in the file of its API), its
//! name in [`endpoints!`] below, a one-line bin in `functions/src/bin/`, a `wiring::Wire` impl if
//! its ports are new, and the function, route and fixture in `template.yaml`, `openapi.yaml` and
//! `events/` (`tests/contract_files.rs` checks each of these against the list).

use std::future::Future;

use http::Method;

use crate::api::error::ApiError;
use crate::api::{Request, Response};

mod agent_api;
mod chat_api;
pub mod ports;

pub use agent_api::{
    Agent, AgentPorts, CallsPorts, CancelCall, CreateCall, DevicePorts, Dispatch, DispatchPorts,
    GetCall, PutDevice,
};
pub use chat_api::{Chat, ChatPorts, ErrorTest, Health, Info, InfoPorts, NoPorts};
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
    pub auth: Auth,
}

/// Body cap of the endpoints whose bodies carry conversation text (chat, agent).
pub const TEXT_BODY_LIMIT: usize = 64 * 1024;
/// Body cap of every other endpoint.
pub const SMALL_BODY_LIMIT: usize = 8 * 1024;

/// The list of endpoints. It makes [`ROUTES`] and [`each`]; both follow this order.
macro_rules! endpoints {
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

endpoints!(
    Chat, Info, Health, ErrorTest, Agent, PutDevice, CreateCall, GetCall, CancelCall, Dispatch,
);

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
