//! Devices: PUT /devices, a device's VoIP push token and the secret that guards it.

pub mod api;
pub mod handler;
pub mod secret;

pub use secret::{SecretRule, admitted};
