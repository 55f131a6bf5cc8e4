//! Koe's backend library: domain types, handlers, ports and their adapters.
//!
//! Requests enter as `http::Request<Bytes>` (from lambda_http, the local server or a test), are
//! parsed into domain types at the edge, go through one handler that talks only to ports, and
//! leave as `http::Response<Bytes>` with the contract's JSON.

pub mod agent;
pub mod api;
pub mod app;
pub mod aws;
pub mod aws_http;
pub mod clock;
pub mod config;
pub mod dispatch;
pub mod domain;
pub mod entrypoints;
pub mod error;
pub mod event_bus;
pub mod https;
pub mod model;
pub mod oidc;
pub mod push;
pub mod routes;
pub mod store;
pub mod telemetry;
pub mod wiring;

pub use app::App;
pub use routes::{Api, Endpoint, ROUTES};
