//! Domain types. Each is made only by parsing, so a value that exists is valid.

pub mod agent;
pub mod chat;
pub mod device;
pub mod json;
pub mod reservation;
