//! Koe's backend library: domain types, handlers, ports and their adapters.
//!
//! Requests enter as `http::Request` (from lambda_http, the local server or a test), go through
//! their endpoint's `Service` (authentication, body cap), are parsed into domain types at the
//! edge, go through one handler that talks only to ports, and leave as `http::Response<Bytes>`
//! with the contract's JSON.
//!
//! The top-level modules import one another one way: none imports one that imports it back,
//! directly or through others (`shared/tests/it/layers.rs` checks that, not an order). Today,
//! lowest first, each importing only from those before it: `clock`, `deadline`, `config`, `domain`,
//! `https`, `metrics` → `aws_http`, `oidc`, `push`, `telemetry` → `aws`, `store` → `event_bus`,
//! `secrets` → `dispatch`, `model` → `agent` → `handlers`, `spend_guard` → `routes` → `edge`
//! → `budgets`, `wiring` → `lambda`.

pub mod agent;
pub mod budgets;
pub mod dispatch;
pub mod domain;
pub mod edge;
pub mod event_bus;
pub mod handlers;
pub mod lambda;
pub mod model;
pub mod oidc;
pub mod platform;
pub mod push;
pub mod routes;
pub mod spend_guard;
pub mod store;
pub mod wiring;

pub use routes::{Api, Endpoint, ROUTES, Route};
pub use wiring::App;
