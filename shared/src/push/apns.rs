//! APNs through a2 (token auth with the team's `.p8` key): topic `<bundle id>.voip`, push type
//! `voip`, priority 10, expiring [`CALL_PUSH_LIFETIME`](super::CALL_PUSH_LIFETIME) after it is
//! sent, to the endpoint of the device's environment.
//!
//! a2 cannot be pointed at anything but Apple's servers, so this adapter stays thin: it builds the
//! request ([`options`], [`ApnsPayload`], unit-tested here) and classifies a2's answer
//! ([`classify`](super::classify::classify), tested on its own); the dispatcher's handling of
//! each class is tested with a stand-in sender.
//!
//! One [`ApnsSender`] is one HTTP/2 connection per environment; [`ApnsSender::connections`] makes
//! them for a [`PushPool`](super::pool::PushPool).

use a2::request::notification::{NotificationOptions, Priority, PushType};
use a2::request::payload::PayloadLike;
use std::sync::Arc;

use a2::{Client, ClientConfig, Endpoint};
use async_trait::async_trait;
use serde::Serialize;

use super::classify::classify;
use super::pool::ConnectionFactory;
use super::{PushError, PushSender, UnavailablePushSender, VoipPush};
use crate::config::{ApnsConfig, ConfigError};
use crate::domain::device::{Device, PushEnvironment};

/// a2's own per-request timeout (whole seconds only). The dispatcher holds each push to a much
/// shorter budget; this only bounds a request the dispatcher has already given up on.
const REQUEST_TIMEOUT_SECS: u64 = 2;

/// One client per APNs environment, built once per container (each keeps its HTTP/2 connection
/// and its provider token, renewed lazily every 55 min). A clone of an `a2::Client` shares its
/// connection, so each `ApnsSender` built is one more connection per environment.
pub struct ApnsSender {
    production: Client,
    sandbox: Client,
    topic: String,
}

impl ApnsSender {
    /// Builds both clients. This is where the `.p8` key is checked: a2 parses it (PEM, then
    /// PKCS#8 with ring, which accepts only an EC P-256 key) and signs a provider token with it,
    /// so a key that cannot sign fails here, at the dispatcher's cold start, not at the first
    /// push.
    pub fn new(config: &ApnsConfig) -> Result<ApnsSender, ApnsKeyError> {
        let pem = normalize_p8(config.key_p8.expose()).map_err(ApnsKeyError::new)?;
        let client = |endpoint| {
            Client::token(
                pem.as_bytes(),
                config.key_id.as_str(),
                config.team_id.as_str(),
                ClientConfig {
                    endpoint,
                    request_timeout_secs: Some(REQUEST_TIMEOUT_SECS),
                    pool_idle_timeout_secs: Some(600),
                },
            )
            // Only the signer can fail here (PEM, PKCS#8, key type, signing); a2's and ring's
            // reasons name the problem, never the key.
            .map_err(|e| {
                ApnsKeyError::new(format!(
                    "is not a usable .p8 key (a PKCS#8 EC P-256 private key): {e}"
                ))
            })
        };
        Ok(ApnsSender {
            production: client(Endpoint::Production)?,
            sandbox: client(Endpoint::Sandbox)?,
            topic: config.topic(),
        })
    }

    /// A push pool's connections: each call builds a new sender (new a2 clients, so new
    /// connections). The key is checked here; a later build cannot fail on it, and if one did,
    /// its pushes would fail and say why.
    pub fn connections(config: &ApnsConfig) -> Result<ConnectionFactory, ApnsKeyError> {
        ApnsSender::new(config)?;
        let config = config.clone();
        Ok(Arc::new(move || -> Arc<dyn PushSender> {
            match ApnsSender::new(&config) {
                Ok(sender) => Arc::new(sender),
                Err(error) => {
                    tracing::error!(%error, "could not build another APNs connection");
                    Arc::new(UnavailablePushSender)
                }
            }
        }))
    }
}

/// The APNs key (`APNS_KEY_P8`) cannot be used; a start-up error like a [`ConfigError`] (and
/// convertible to one). Its reason never contains the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApnsKeyError {
    pub reason: String,
}

impl ApnsKeyError {
    /// The variable at fault.
    pub const VAR: &'static str = "APNS_KEY_P8";

    fn new(reason: impl Into<String>) -> ApnsKeyError {
        ApnsKeyError {
            reason: reason.into(),
        }
    }
}

impl std::fmt::Display for ApnsKeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        ConfigError::from(self.clone()).fmt(f)
    }
}

impl std::error::Error for ApnsKeyError {}

impl From<ApnsKeyError> for ConfigError {
    fn from(e: ApnsKeyError) -> ConfigError {
        ConfigError {
            var: ApnsKeyError::VAR,
            reason: e.reason,
        }
    }
}

/// The `.p8` key as PEM, from the PEM itself (real or `\n`-escaped line breaks, as a template
/// parameter may carry it) or from just its base64 body on one line. Only the text is
/// rearranged; what it encodes is a2's to parse.
fn normalize_p8(raw: &str) -> Result<String, &'static str> {
    let text = raw.replace("\\n", "\n");
    let body: String = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("-----"))
        .flat_map(str::chars)
        .filter(|c| !c.is_whitespace())
        .collect();
    if body.is_empty()
        || !body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
    {
        return Err(
            "must be the .p8 key: its PEM text, or the base64 between its BEGIN and END lines",
        );
    }
    let mut pem = String::from("-----BEGIN PRIVATE KEY-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).expect("checked ASCII above"));
        pem.push('\n');
    }
    pem.push_str("-----END PRIVATE KEY-----\n");
    Ok(pem)
}

/// The request headers of a call's push.
pub fn options<'a>(topic: &'a str, push: &VoipPush) -> NotificationOptions<'a> {
    NotificationOptions {
        apns_push_type: Some(PushType::Voip),
        apns_priority: Some(Priority::High),
        apns_expiration: Some(push.expires_at.timestamp().max(0) as u64),
        apns_topic: Some(topic),
        ..Default::default()
    }
}

/// The body a2 sends: our payload, plus the options and token a2 reads through `PayloadLike`.
#[derive(Serialize)]
pub struct ApnsPayload<'a> {
    #[serde(flatten)]
    push: &'a VoipPush,
    #[serde(skip)]
    options: NotificationOptions<'a>,
    #[serde(skip)]
    device_token: &'a str,
}

impl<'a> ApnsPayload<'a> {
    pub fn new(topic: &'a str, push: &'a VoipPush, device_token: &'a str) -> ApnsPayload<'a> {
        ApnsPayload {
            push,
            options: options(topic, push),
            device_token,
        }
    }
}

/// Never prints the token (a2 requires `Debug`).
impl std::fmt::Debug for ApnsPayload<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApnsPayload")
            .field("push", self.push)
            .field("options", &self.options)
            .field("device_token", &"***")
            .finish()
    }
}

impl PayloadLike for ApnsPayload<'_> {
    fn get_device_token(&self) -> &str {
        self.device_token
    }

    fn get_options(&self) -> &NotificationOptions<'_> {
        &self.options
    }
}

#[async_trait]
impl PushSender for ApnsSender {
    async fn send(&self, push: &VoipPush, device: &Device) -> Result<(), PushError> {
        let client = match device.environment {
            PushEnvironment::Production => &self.production,
            PushEnvironment::Sandbox => &self.sandbox,
        };
        let payload = ApnsPayload::new(&self.topic, push, device.voip_token.expose());
        classify(client.send(payload).await)
    }

    /// Nothing: a2 0.10's hyper client is private and connects lazily in `send`, and we send no
    /// request just to connect. So a cold connection's first push (and every push queued behind
    /// it) pays TCP + TLS + HTTP/2 setup, ~100-200 ms from Lambda (docs/benchmarks.md, "APNs connection pool").
    async fn warm(&self) {}
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};

    use super::*;
    use crate::config::Secret;

    const TEST_P8: &str = include_str!("../../../testkit/keys/apns-test.p8");
    const RSA_PKCS8: &str = include_str!("../../../testkit/keys/oidc-test-rsa.pem");

    fn push() -> VoipPush {
        VoipPush {
            aps: Default::default(),
            call_id: "c0ffee".into(),
            attempt: 1,
            caller_name: Some("Mika".into()),
            scheduled_at: "2026-01-01T09:00:30+09:00".into(),
            expires_at: DateTime::parse_from_rfc3339("2026-01-01T00:01:00Z")
                .unwrap()
                .with_timezone(&Utc),
        }
    }

    #[test]
    fn options_are_a_voip_push_at_priority_10_for_the_voip_topic() {
        let push = push();
        let options = options("com.example.koe.voip", &push);
        assert_eq!(options.apns_push_type, Some(PushType::Voip));
        assert_eq!(
            options.apns_priority.as_ref().map(ToString::to_string),
            Some("10".to_owned())
        );
        assert_eq!(options.apns_topic, Some("com.example.koe.voip"));
        assert_eq!(
            options.apns_expiration,
            Some(push.expires_at.timestamp() as u64)
        );
        assert!(options.apns_collapse_id.is_none());
    }

    #[test]
    fn the_body_is_our_payload_and_the_token_stays_out_of_it_and_of_debug() {
        let push = push();
        let token = "ab".repeat(32);
        let payload = ApnsPayload::new("com.example.koe.voip", &push, &token);
        let body: serde_json::Value =
            serde_json::from_str(&payload.to_json_string().unwrap()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "aps": {},
                "callId": "c0ffee",
                "attempt": 1,
                "callerName": "Mika",
                "scheduledAt": "2026-01-01T09:00:30+09:00",
            })
        );
        assert_eq!(payload.get_device_token(), token);
        assert!(!format!("{payload:?}").contains(&token));
    }

    fn config(key: &str) -> ApnsConfig {
        ApnsConfig {
            key_p8: Secret::new(key),
            key_id: "ABCDE12345".into(),
            team_id: "TEAM123456".into(),
            bundle_id: "com.example.koe".into(),
        }
    }

    #[test]
    fn the_p8_key_is_accepted_as_pem_escaped_pem_or_bare_base64() {
        let pem = normalize_p8(TEST_P8).unwrap();
        assert_eq!(pem, TEST_P8, "the test key is already normal PEM");
        let escaped = TEST_P8.replace('\n', "\\n");
        assert_eq!(normalize_p8(&escaped).unwrap(), pem);
        let bare: String = TEST_P8
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        assert_eq!(normalize_p8(&bare).unwrap(), pem);

        assert!(normalize_p8("").is_err());
        assert!(normalize_p8("not a key!").is_err());
    }

    #[tokio::test]
    async fn a_sender_builds_from_a_p256_key_given_in_any_of_its_forms() {
        let escaped = TEST_P8.replace('\n', "\\n");
        let bare: String = TEST_P8
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        for key in [TEST_P8, &escaped, &bare] {
            let sender = ApnsSender::new(&config(key)).unwrap();
            assert_eq!(sender.topic, "com.example.koe.voip");
        }
    }

    #[tokio::test]
    async fn pool_connections_check_the_key_up_front() {
        assert!(ApnsSender::connections(&config(TEST_P8)).is_ok());
        let err = ApnsSender::connections(&config("AAAA"))
            .err()
            .expect("refused");
        assert_eq!(ConfigError::from(err).var, "APNS_KEY_P8");
    }

    /// The reason a key is refused with, checked to name the variable and not the key.
    fn refused(key: &str) -> String {
        let Err(err) = ApnsSender::new(&config(key)) else {
            panic!("{key:?} was accepted");
        };
        let shown = err.to_string();
        assert!(shown.contains("APNS_KEY_P8"), "{shown}");
        let body: String = key.lines().filter(|l| !l.starts_with("-----")).collect();
        assert!(body.len() < 8 || !shown.contains(&body[..8]), "{shown}");
        assert_eq!(ConfigError::from(err).var, "APNS_KEY_P8");
        shown
    }

    #[tokio::test]
    async fn a_malformed_key_is_refused_naming_the_variable() {
        // Not base64 at all, base64 that is not DER, base64 of the wrong length, and the test
        // key cut short (PEM framing intact, its DER truncated).
        let truncated: String = TEST_P8
            .lines()
            .enumerate()
            .filter(|(i, _)| *i != 2)
            .map(|(_, l)| format!("{l}\n"))
            .collect();
        for key in ["not a key!", "AAAA", "AAAAA", truncated.as_str()] {
            refused(key);
        }
    }

    #[tokio::test]
    async fn a_key_that_is_not_ec_p256_is_refused() {
        // An RSA key in PKCS#8 PEM: well-formed, but not the kind APNs tokens are signed with.
        let shown = refused(RSA_PKCS8);
        assert!(shown.contains("EC P-256"), "{shown}");
    }
}
