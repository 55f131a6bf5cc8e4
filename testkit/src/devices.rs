//! Devices for the tests that store them by hand.

use chrono::{DateTime, Utc};
use koe::domain::device::{Device, DeviceId, PushEnvironment, VoipToken};

/// Device `id` in `environment`, updated at `updated_at`, with a random VoIP token; it does not
/// confirm its calls and has no alert token.
pub fn device(id: &str, environment: PushEnvironment, updated_at: DateTime<Utc>) -> Device {
    Device {
        device_id: DeviceId::parse("deviceId", id).unwrap(),
        voip_token: VoipToken::parse("voipToken", &random_token()).unwrap(),
        environment,
        updated_at,
        confirms_calls: false,
        alert_token: None,
    }
}

/// A device id of `prefix` and 16 random hex digits.
pub fn random_id(prefix: &str) -> String {
    format!("{prefix}{:016x}", fastrand::u64(..))
}

/// 64 random hex digits: a VoIP or alert token.
pub fn random_token() -> String {
    format!("{:064x}", fastrand::u128(..))
}
