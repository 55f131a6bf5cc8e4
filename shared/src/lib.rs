//! Koe's backend library: one folder per feature over shared ports and one platform.
//!
//! Requests enter as `http::Request` (from lambda_http, the local server or a test) in `app`,
//! go through their endpoint's `Service` (authentication, body cap), are parsed into domain types
//! by their feature, go through one handler that talks only to ports, and leave as
//! `http::Response<Bytes>` with the contract's JSON.
//!
//! At most 12 top-level modules, importing one another one way: none imports one that imports it
//! back, directly or through others, and no file either (`shared/tests/it/layers.rs`). Lowest
//! first: `domain` → `platform` (config, clock, deadlines, AWS clients, errors, the endpoint
//! definition) → the ports `store`, `push`, `model`, `event_bus` → the features `dispatch`,
//! `devices`, `calls`, `chat`, `agent` → `app` (route table, wiring, Lambda and edge).

pub mod agent;
pub mod app;
pub mod calls;
pub mod chat;
pub mod devices;
pub mod dispatch;
pub mod domain;
pub mod event_bus;
pub mod model;
pub mod platform;
pub mod push;
pub mod store;

pub use app::ROUTES;
pub use app::wiring::App;
pub use platform::endpoint::{Api, Endpoint, Route};
