//! Call reservations: POST, GET and DELETE /calls, POST /calls/confirm, and the per-minute
//! capacity a reservation is admitted under.

pub mod api;
pub mod capacity;
pub mod confirm;
pub mod handler;
