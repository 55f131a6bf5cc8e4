//! The app: the one route table (every endpoint, each defined in its feature's `api.rs`), the
//! wiring of the adapters behind the ports (`app/wiring/`, `ports.rs`), the runtime adapters a
//! request enters by (`app/lambda/` the Lambda events, `app/edge/` the service around each
//! handler), and the time budgets of every function (`budgets.rs`). It names every feature;
//! nothing imports it.
//!
//! Adding an endpoint: a unit struct with an `impl Endpoint` in its feature's `api.rs`, its name
//! in [`routes!`] below, a one-line bin in `functions/src/bin/`, a `ports::Ports` impl if its
//! ports are new (and an `Adapters` accessor, implemented by `wiring::App`, if an adapter is),
//! and the function, route and fixture in `template.yaml`, `openapi.yaml` and `events/`
//! (`shared/tests/it/contract_files/` checks each of these against the list).

use http::Method;

use crate::agent::api::{AGENT_BODY_LIMIT, Agent};
use crate::calls::api::{CancelCall, ConfirmCall, CreateCall, GetCall};
use crate::chat::api::{CHAT_BODY_LIMIT, Chat, ChatStream, ErrorTest, Health, Info};
use crate::devices::api::PutDevice;
use crate::dispatch::api::Dispatch;
use crate::platform::endpoint::{Api, Endpoint, Route};

pub mod budgets;
pub mod edge;
pub mod lambda;
pub mod ports;
pub mod wiring;

use self::ports::Served;

/// Lambda's 6 MB request payload limit binds before API Gateway's 10 MB: the event that carries
/// the body writes it again as a JSON string (each `"` and `\` doubled), so a body of up to
/// 3 MB always fits in the event.
const _: () = assert!(CHAT_BODY_LIMIT <= 3_000_000 && AGENT_BODY_LIMIT <= 3_000_000);
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
    entrypoint: "koe::app::lambda::chat_stream::run()",
}];

/// What [`each`] calls for every endpoint type.
pub trait Visit {
    fn visit<E: Served>(&mut self);
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
