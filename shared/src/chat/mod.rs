//! Chat (`{base_url}`, no auth): POST /api/chat, answered whole or streamed, and the public
//! API's info, health and error-test endpoints.

pub mod api;
pub mod handler;
pub mod meta;
pub mod stream;
