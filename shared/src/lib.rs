//! Koe's backend library: domain types, handlers, ports and their adapters.
//!
//! Requests enter as `http::Request` (from lambda_http, the local server or a test), go through
//! their endpoint's `Service` (authentication, body cap), are parsed into domain types at the
//! edge, go through one handler that talks only to ports, and leave as `http::Response<Bytes>`
//! with the contract's JSON.
//!
//! Layers, lowest first; a module imports only from layers below it (`tests/layers.rs` checks):
//! `clock`, `config`, `domain`, `metrics`, `telemetry` → `https`, `aws_http`, `aws` → `store`, `model`,
//! `push`, `event_bus`, `oidc` → `agent`, `dispatch` → `api` → `endpoints` → `service` →
//! `wiring` → `entrypoints`.

pub mod agent;
pub mod api;
pub mod aws;
pub mod aws_http;
pub mod budgets;
pub mod clock;
pub mod config;
pub mod dispatch;
pub mod domain;
pub mod endpoints;
pub mod entrypoints;
pub mod event_bus;
pub mod https;
pub mod metrics;
pub mod model;
pub mod oidc;
pub mod push;
pub mod secrets;
pub mod service;
pub mod spend_guard;
pub mod store;
pub mod telemetry;
pub mod wiring;

pub use endpoints::{Api, Endpoint, ROUTES, Route};
pub use wiring::App;
