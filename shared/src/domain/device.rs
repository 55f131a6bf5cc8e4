//! Devices: `DeviceId`, `VoipToken`, `AlertToken`, `PushEnvironment`, and the registration
//! record.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::Invalid;

/// A client-chosen device identifier (typically `identifierForVendor`, a UUID): 1 to 128
/// characters from `A-Z a-z 0-9 - _ . :`. Logged only as [`DeviceId::log_hash`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId(String);

pub const MAX_DEVICE_ID_CHARS: usize = 128;

impl DeviceId {
    /// Parses the value of the field named `field` (for the error message).
    pub fn parse(field: &str, raw: &str) -> Result<DeviceId, Invalid> {
        let valid = !raw.is_empty()
            && raw.len() <= MAX_DEVICE_ID_CHARS
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
        if valid {
            Ok(DeviceId(raw.to_owned()))
        } else {
            Err(Invalid::new(
                field,
                format!(
                    "must be 1 to {MAX_DEVICE_ID_CHARS} characters of letters, digits, '-', '_', '.' or ':'"
                ),
            ))
        }
    }

    /// Rebuilds an id read back from the store (it was valid when stored).
    pub fn from_stored(raw: String) -> DeviceId {
        DeviceId(raw)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A short salted hash for logs: 12 hex characters of SHA-256(salt ‖ id).
    pub fn log_hash(&self, salt: &str) -> String {
        let digest = Sha256::new()
            .chain_update(salt.as_bytes())
            .chain_update([0u8])
            .chain_update(self.0.as_bytes())
            .finalize();
        super::hex(&digest[..6])
    }
}

/// A device's secret, given to the app by the PUT /devices that registers the device and
/// presented back (`X-Device-Secret`) to change the registration: 32 bytes from the operating
/// system's generator, as 64 hex digits. Only its SHA-256 ([`secret_hash`]) is stored; the
/// secret itself is never logged or stored.
pub struct DeviceSecret(String);

/// The header that carries the device secret.
pub const DEVICE_SECRET_HEADER: &str = "x-device-secret";
/// The longest `X-Device-Secret` looked at (a secret is 64 characters).
const MAX_SECRET_CHARS: usize = 128;

impl DeviceSecret {
    /// The SHA-256 of the request's `X-Device-Secret`, if it carries one (refused if it is
    /// empty or too long to be a secret).
    pub fn presented_hash(headers: &http::HeaderMap) -> Result<Option<String>, Invalid> {
        let Some(value) = headers.get(DEVICE_SECRET_HEADER) else {
            return Ok(None);
        };
        value
            .to_str()
            .ok()
            .filter(|v| !v.is_empty() && v.len() <= MAX_SECRET_CHARS)
            .map(|v| Some(secret_hash(v)))
            .ok_or_else(|| {
                Invalid::new(
                    "X-Device-Secret",
                    "must be the deviceSecret a PUT /devices answered",
                )
            })
    }

    pub fn generate() -> DeviceSecret {
        DeviceSecret(super::random_hex::<32>())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn hash(&self) -> String {
        secret_hash(&self.0)
    }
}

impl std::fmt::Debug for DeviceSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeviceSecret(..)")
    }
}

/// SHA-256 (hex) of a presented or issued device secret: what the store keeps and compares.
pub fn secret_hash(secret: &str) -> String {
    super::hex(&Sha256::digest(secret.as_bytes()))
}

/// An APNs VoIP device token: 64 to 200 hex digits, stored lowercase. Never logged or returned.
#[derive(Clone, PartialEq, Eq)]
pub struct VoipToken(String);

impl VoipToken {
    pub fn parse(field: &str, raw: &str) -> Result<VoipToken, Invalid> {
        if (64..=200).contains(&raw.len()) && raw.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(VoipToken(raw.to_ascii_lowercase()))
        } else {
            Err(Invalid::new(field, "must be 64 to 200 hexadecimal digits"))
        }
    }

    pub fn from_stored(raw: String) -> VoipToken {
        VoipToken(raw)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for VoipToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VoipToken(***)")
    }
}

/// The app's regular remote-notification token (`alertToken`, opt-in): where the missed-call
/// notice goes (docs/dispatch.md, "Missed-call notice"). Hex like [`VoipToken`], the same length
/// rules, stored lowercase. Never logged or returned.
#[derive(Clone, PartialEq, Eq)]
pub struct AlertToken(String);

impl AlertToken {
    pub fn parse(field: &str, raw: &str) -> Result<AlertToken, Invalid> {
        VoipToken::parse(field, raw).map(|t| AlertToken(t.0))
    }

    pub fn from_stored(raw: String) -> AlertToken {
        AlertToken(raw)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for AlertToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AlertToken(***)")
    }
}

/// Which APNs environment the token belongs to (debug builds: sandbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PushEnvironment {
    #[default]
    Production,
    Sandbox,
}

impl PushEnvironment {
    pub fn parse(field: &str, raw: &str) -> Result<PushEnvironment, Invalid> {
        PushEnvironment::from_stored(raw)
            .ok_or_else(|| Invalid::new(field, "must be one of production, sandbox"))
    }

    pub fn from_stored(raw: &str) -> Option<PushEnvironment> {
        match raw {
            "production" => Some(PushEnvironment::Production),
            "sandbox" => Some(PushEnvironment::Sandbox),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PushEnvironment::Production => "production",
            PushEnvironment::Sandbox => "sandbox",
        }
    }
}

/// A registered device. One per `DeviceId`; PUT /devices replaces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub device_id: DeviceId,
    pub voip_token: VoipToken,
    pub environment: PushEnvironment,
    pub updated_at: DateTime<Utc>,
    /// The app confirms each call push (`POST /calls/confirm`) and drops a repeated `callId`:
    /// a push it does not confirm within the wait goes again (docs/app.md). `false`: one push.
    pub confirms_calls: bool,
    /// Where the missed-call notice goes, if the app registered for it (`alertToken`).
    pub alert_token: Option<AlertToken>,
}

/// How long a device's record lives after its last `PUT /devices` (its TTL, `expireAt`): the
/// tokens of abandoned installs do not stay for ever. Past it the record is absent to every
/// read, and the next `PUT /devices` registers the id anew with a new secret
/// (docs/security.md, "An expired device record").
pub const DEVICE_RETENTION: chrono::Duration = chrono::Duration::days(400);

impl Device {
    /// When the record written now expires (epoch seconds).
    pub fn expire_at(&self) -> i64 {
        (self.updated_at + DEVICE_RETENTION).timestamp()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ids_accept_uuids_and_reject_the_rest() {
        assert!(DeviceId::parse("deviceId", "6F9619FF-8B86-D011-B42D-00C04FC964FF").is_ok());
        for bad in ["", "has space", "ü", &"a".repeat(129), "a/b"] {
            let err = DeviceId::parse("deviceId", bad).unwrap_err();
            assert!(err.to_string().starts_with("deviceId must be"), "{bad}");
        }
    }

    #[test]
    fn log_hash_is_short_salted_and_stable() {
        let id = DeviceId::parse("deviceId", "device-1").unwrap();
        assert_eq!(id.log_hash("s"), id.log_hash("s"));
        assert_ne!(id.log_hash("s"), id.log_hash("t"));
        assert_eq!(id.log_hash("s").len(), 12);
        assert!(!id.log_hash("s").contains("device"));
    }

    #[test]
    fn voip_tokens_are_hex_64_to_200_and_never_debug_printed() {
        let token = VoipToken::parse("voipToken", &"AB".repeat(32)).unwrap();
        assert_eq!(token.expose(), "ab".repeat(32));
        assert!(!format!("{token:?}").contains("ab"));
        assert!(VoipToken::parse("voipToken", &"a".repeat(63)).is_err());
        assert!(VoipToken::parse("voipToken", &"a".repeat(201)).is_err());
        assert!(VoipToken::parse("voipToken", &"g".repeat(64)).is_err());
    }

    #[test]
    fn alert_tokens_follow_the_voip_token_rules_and_are_never_debug_printed() {
        let token = AlertToken::parse("alertToken", &"CD".repeat(32)).unwrap();
        assert_eq!(token.expose(), "cd".repeat(32));
        assert!(!format!("{token:?}").contains("cd"));
        let err = AlertToken::parse("alertToken", &"a".repeat(63)).unwrap_err();
        assert!(err.to_string().starts_with("alertToken must be"), "{err}");
        assert!(AlertToken::parse("alertToken", &"a".repeat(201)).is_err());
        assert!(AlertToken::parse("alertToken", &"g".repeat(64)).is_err());
    }
}
