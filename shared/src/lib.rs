//! Koe's backend library: domain types, handlers, ports and their adapters.
//!
//! Requests enter as `http::Request` (from lambda_http, the local server or a test), go through
//! their endpoint's `Service` (authentication, body cap), are parsed into domain types at the
//! edge, go through one handler that talks only to ports, and leave as `http::Response<Bytes>`
//! with the contract's JSON.
//!
//! The top-level modules import one another one way: none imports one that imports it back,
//! directly or through others (`shared/tests/it/layers.rs` checks that, not an order). Today,
//! lowest first: `domain` → `platform` (config, clock, deadlines, AWS clients, errors, request
//! plumbing) → the ports `store`, `push`, `model`, `event_bus` → `dispatch` → the features
//! `devices`, `calls`, `chat`, `agent` → `spend_guard` → `routes` → `edge` → `budgets`, `wiring`
//! → `lambda`.

pub mod agent;
pub mod budgets;
pub mod calls;
pub mod chat;
pub mod devices;
pub mod dispatch;
pub mod domain;
pub mod edge;
pub mod event_bus;
pub mod lambda;
pub mod model;
pub mod platform;
pub mod push;
pub mod routes;
pub mod spend_guard;
pub mod store;
pub mod wiring;

pub use routes::{Api, Endpoint, ROUTES, Route};
pub use wiring::App;
