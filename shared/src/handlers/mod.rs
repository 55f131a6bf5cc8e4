//! HTTP handlers: plain async functions from `http::Request<Bytes>` to a response or an
//! `ApiError`. They know nothing of Lambda or of the local server.

pub mod agent;
pub mod calls;
pub mod capacity;
pub mod chat;
pub mod chat_stream;
pub mod confirm;
pub mod devices;
pub mod dispatch;
pub mod meta;
