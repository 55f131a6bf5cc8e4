//! Test and benchmark kit: stand-ins for outside services on loopback, a log capture, and a
//! harness that starts the real local server.

#[doc(hidden)]
pub use async_trait;

pub mod clock;
pub mod cloudwatch;
pub mod deployed;
pub mod devices;
pub mod dispatching;
pub mod docs_tables;
pub mod dynamodb;
pub mod emf;
pub mod eventbridge;
pub mod events;
pub mod faults;
pub mod fixtures;
pub mod function_url;
pub mod gateway;
pub mod harness;
pub mod local_env;
pub mod logs;
pub mod loopback;
pub mod oidc;
pub mod on_call;
pub mod openai;
pub mod push;
pub mod raw_http;
pub mod runtime_api;
pub mod secretsmanager;
pub mod store_layer;
pub mod template;
