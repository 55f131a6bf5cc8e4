//! Devices: a device's registration (its VoIP push token) and the secret that guards it; the
//! endpoints are in `api.rs`.

pub mod api;
pub mod handler;
pub mod secret;

pub use secret::{SecretRule, admitted};
