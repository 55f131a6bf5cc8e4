//! The app: the one route table (every endpoint, each defined in its feature's `api.rs`), the
//! wiring of the adapters behind the ports (`app/wiring/`, `ports.rs`), the runtime adapters a
//! request enters by (`app/lambda/` the Lambda events, `app/edge/` the service around each
//! handler), and the time budgets of every function (`budgets.rs`). It names every feature;
//! nothing imports it.
//!
//! Adding an endpoint: the seven files docs/architecture.md ("Change an endpoint") lists; this
//! file only if a feature is new.

use std::sync::LazyLock;

use http::Method;

use crate::agent::api::AGENT_BODY_LIMIT;
use crate::chat::api::{CHAT_BODY_LIMIT, ChatStream};
use crate::platform::endpoint::{Api, Endpoint, Route};
use crate::{agent, calls, chat, devices, dispatch};

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
/// Calls `visit` once per endpoint of the route table, with the endpoint as a type (the local
/// server builds a service of each; tests visit them all): each feature's `Endpoints`, features
/// in this order.
pub fn each<V: Visit>(visit: &mut V) {
    <chat::api::Endpoints as EndpointList>::each(visit);
    <agent::api::Endpoints as EndpointList>::each(visit);
    <devices::api::Endpoints as EndpointList>::each(visit);
    <calls::api::Endpoints as EndpointList>::each(visit);
    <dispatch::api::Endpoints as EndpointList>::each(visit);
}

/// Every route, in [`each`]'s order.
pub static ROUTES: LazyLock<Vec<Route>> = LazyLock::new(|| {
    struct Collect(Vec<Route>);
    impl Visit for Collect {
        fn visit<E: Served>(&mut self) {
            self.0.push(E::ROUTE);
        }
    }
    let mut routes = Collect(Vec::new());
    each(&mut routes);
    routes.0
});

/// A feature's list of endpoints: a tuple of endpoint types.
pub trait EndpointList {
    fn each<V: Visit>(visit: &mut V);
}

macro_rules! endpoint_list {
    ($($endpoint:ident),+) => {
        impl<$($endpoint: Served),+> EndpointList for ($($endpoint,)+) {
            fn each<V: Visit>(visit: &mut V) {
                $(visit.visit::<$endpoint>();)+
            }
        }
    };
}

endpoint_list!(A);
endpoint_list!(A, B);
endpoint_list!(A, B, C);
endpoint_list!(A, B, C, D);
endpoint_list!(A, B, C, D, E);
endpoint_list!(A, B, C, D, E, F);

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
        for r in ROUTES.iter() {
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
