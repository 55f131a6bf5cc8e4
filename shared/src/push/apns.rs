//! APNs with token auth (the team's `.p8` key): topic `<bundle id>.voip`, push type `voip`,
//! priority 10, expiring [`CALL_PUSH_LIFETIME`](super::CALL_PUSH_LIFETIME) after it is sent, to
//! the endpoint of the device's environment, over our own HTTP/2 connections
//! ([`connection`](super::connection)), signed with a provider token ([`token`](super::token)).
//!
//! One [`ApnsSender`] is one HTTP/2 connection per environment; [`ApnsSender::connections`] makes
//! them for a [`PushPool`](super::pool::PushPool).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::time::Instant;

use super::connection::{ApnsConnection, ApnsHost, ConnectionTimings};
use super::pool::ConnectionFactory;
use super::token::ProviderToken;
use super::{AlertPush, Notice, PushError, PushSender, VoipPush};
use crate::domain::device::{Device, PushEnvironment};
use crate::platform::clock::{Clock, SystemClock};
use crate::platform::config::{ApnsConfig, ConfigError};

/// Where each environment's connections go.
#[derive(Debug, Clone)]
pub struct ApnsHosts {
    pub production: ApnsHost,
    pub sandbox: ApnsHost,
}

impl Default for ApnsHosts {
    fn default() -> ApnsHosts {
        ApnsHosts {
            production: ApnsHost::PRODUCTION,
            sandbox: ApnsHost::SANDBOX,
        }
    }
}

/// One connection per APNs environment (each opened on first use), and the provider token.
pub struct ApnsSender {
    production: ApnsConnection,
    sandbox: ApnsConnection,
    token: Arc<ProviderToken>,
    topic: String,
}

impl ApnsSender {
    /// Checks the `.p8` key: it must parse as a PKCS#8 EC P-256 private key (nothing is signed
    /// yet), so a key that cannot sign fails here, at the dispatcher's cold start, not at the
    /// first push.
    pub fn new(config: &ApnsConfig) -> Result<ApnsSender, ApnsKeyError> {
        Ok(ApnsSender::with(
            Arc::new(provider_token(config, Arc::new(SystemClock))?),
            config,
            &ApnsHosts::default(),
            ConnectionTimings::default(),
        ))
    }

    fn with(
        token: Arc<ProviderToken>,
        config: &ApnsConfig,
        hosts: &ApnsHosts,
        timings: ConnectionTimings,
    ) -> ApnsSender {
        ApnsSender {
            production: ApnsConnection::new(hosts.production.clone(), timings),
            sandbox: ApnsConnection::new(hosts.sandbox.clone(), timings),
            token,
            topic: config.topic(),
        }
    }

    /// A push pool's connections to Apple: each call of the factory builds a new sender (new
    /// connections), all signing with one provider token. The key is checked here, without
    /// signing a token.
    pub fn connections(config: &ApnsConfig) -> Result<ConnectionFactory, ApnsKeyError> {
        ApnsSender::connections_to(config, ApnsHosts::default(), ConnectionTimings::default())
    }

    /// [`connections`](ApnsSender::connections), or to `endpoint` (`APNS_ENDPOINT`: a loopback
    /// APNs-compatible server over HTTP/2 without TLS) for both environments.
    pub fn connections_at(
        config: &ApnsConfig,
        endpoint: Option<std::net::SocketAddr>,
    ) -> Result<ConnectionFactory, ApnsKeyError> {
        let Some(addr) = endpoint else {
            return ApnsSender::connections(config);
        };
        tracing::info!(%addr, "APNS_ENDPOINT: pushes go to this server, not to Apple");
        let hosts = ApnsHosts {
            production: ApnsHost::Plain(addr),
            sandbox: ApnsHost::Plain(addr),
        };
        ApnsSender::connections_to(config, hosts, ConnectionTimings::default())
    }

    /// [`connections`](ApnsSender::connections) to `hosts` (a test's stand-in).
    pub fn connections_to(
        config: &ApnsConfig,
        hosts: ApnsHosts,
        timings: ConnectionTimings,
    ) -> Result<ConnectionFactory, ApnsKeyError> {
        ApnsSender::connections_with_clock(config, hosts, timings, Arc::new(SystemClock))
    }

    /// [`connections_to`](ApnsSender::connections_to), the provider token telling time by
    /// `clock` (a test's).
    pub fn connections_with_clock(
        config: &ApnsConfig,
        hosts: ApnsHosts,
        timings: ConnectionTimings,
        clock: Arc<dyn Clock>,
    ) -> Result<ConnectionFactory, ApnsKeyError> {
        let token = Arc::new(provider_token(config, clock)?);
        let config = config.clone();
        Ok(Arc::new(move || -> Arc<dyn PushSender> {
            Arc::new(ApnsSender::with(token.clone(), &config, &hosts, timings))
        }))
    }
}

/// The key as a token signer; the reason never contains the key.
fn provider_token(
    config: &ApnsConfig,
    clock: Arc<dyn Clock>,
) -> Result<ProviderToken, ApnsKeyError> {
    let pem = normalize_p8(config.key_p8.expose()).map_err(ApnsKeyError::new)?;
    ProviderToken::with_clock(&pem, &config.key_id, &config.team_id, clock).map_err(|e| {
        ApnsKeyError::new(format!(
            "is not a usable .p8 key (a PKCS#8 EC P-256 private key): {e}"
        ))
    })
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
/// rearranged; what it encodes is parsed by [`ProviderToken::new`].
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

/// A call's push to the device with `device_token`, at `origin`: its headers (the body is
/// [`VoipPush::to_json`]).
pub fn request(
    origin: &str,
    topic: &str,
    push: &VoipPush,
    device_token: &str,
    bearer: &str,
    body_len: usize,
) -> Result<http::Request<()>, http::Error> {
    apns_request(
        origin,
        "voip",
        topic,
        push.expires_at,
        device_token,
        bearer,
        body_len,
    )
}

/// One APNs request's head: push type `push_type` at priority 10 to `topic`, expiring at
/// `expires_at`; the JSON body of `body_len` bytes follows on the stream.
fn apns_request(
    origin: &str,
    push_type: &str,
    topic: &str,
    expires_at: chrono::DateTime<chrono::Utc>,
    device_token: &str,
    bearer: &str,
    body_len: usize,
) -> Result<http::Request<()>, http::Error> {
    http::Request::post(format!("{origin}/3/device/{device_token}"))
        .header("apns-push-type", push_type)
        .header("apns-priority", "10")
        .header("apns-expiration", expires_at.timestamp().max(0).to_string())
        .header("apns-topic", topic)
        .header("authorization", bearer)
        .header("content-type", "application/json")
        .header("content-length", body_len.to_string())
        .body(())
}

/// A missed-call notice to the device's alert token `device_token`: an alert push (push type
/// `alert`, priority 10) for the app's own topic, the bundle id (`voip_topic` without `.voip`);
/// the body is [`AlertPush::to_json`].
pub fn alert_request(
    origin: &str,
    voip_topic: &str,
    push: &AlertPush,
    device_token: &str,
    bearer: &str,
    body_len: usize,
) -> Result<http::Request<()>, http::Error> {
    let topic = voip_topic.strip_suffix(".voip").unwrap_or(voip_topic);
    apns_request(
        origin,
        "alert",
        topic,
        push.expires_at,
        device_token,
        bearer,
        body_len,
    )
}

impl ApnsSender {
    /// Posts `body` on the connection of `device`'s environment, under the head `head` builds
    /// from that connection's origin, a bearer token and the body's length. A push APNs refused
    /// for an expired provider token (its clock ahead of ours) goes once more with a new one.
    async fn post(
        &self,
        (device, leave_by, stream_by): (&Device, Option<Instant>, Option<Instant>),
        body: String,
        head: impl Fn(&str, &str, usize) -> Result<http::Request<()>, http::Error> + Send,
    ) -> Result<(), PushError> {
        let connection = match device.environment {
            PushEnvironment::Production => &self.production,
            PushEnvironment::Sandbox => &self.sandbox,
        };
        let body = Bytes::from(body);
        let mut renewed = false;
        loop {
            let bearer = self.token.bearer().map_err(|reason| PushError::Rejected {
                status: None,
                reason,
            })?;
            let request = head(&connection.origin(), &bearer, body.len())
                // Only a token that is not a valid URI path could fail here; the reason names
                // no token.
                .map_err(|_| PushError::Rejected {
                    status: None,
                    reason: "the push request could not be built".into(),
                })?;
            let result = connection
                .send(request, body.clone(), (leave_by, stream_by))
                .await;
            let expired = matches!(
                &result,
                Err(PushError::Rejected { status: Some(403), reason }) if reason == "ExpiredProviderToken"
            );
            if !expired || renewed || !self.token.renew_expired(&bearer) {
                return result;
            }
            tracing::warn!("APNs found the provider token expired: a new one is signed");
            renewed = true;
        }
    }
}

#[async_trait]
impl PushSender for ApnsSender {
    async fn send_notice(&self, notice: Notice<'_>) -> Result<(), PushError> {
        let (push, token) = (notice.push, notice.token.expose());
        self.post(
            (notice.device, None, None),
            push.to_json(),
            |origin, bearer, body_len| {
                alert_request(origin, &self.topic, push, token, bearer, body_len)
            },
        )
        .await
    }

    async fn send(&self, push: &VoipPush, device: &Device) -> Result<(), PushError> {
        self.post(
            (device, push.leave_by, push.stream_by),
            push.to_json(),
            |origin, bearer, body_len| {
                request(
                    origin,
                    &self.topic,
                    push,
                    device.voip_token.expose(),
                    bearer,
                    body_len,
                )
            },
        )
        .await
    }

    /// Opens the production connection (sandbox devices are few; theirs opens on first use).
    async fn warm(&self) {
        self.production.warm().await
    }

    /// The production connection's (sandbox devices are few).
    fn headroom(&self) -> Option<usize> {
        self.production.headroom()
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};

    use super::*;
    use crate::platform::config::Secret;

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
            leave_by: None,
            stream_by: None,
        }
    }

    const ORIGIN: &str = "https://api.push.apple.com";
    const VOIP_TOPIC: &str = "com.example.koe.voip";
    const BEARER: &str = "bearer x.y.z";

    /// Checks that `request` is a POST to `token`'s device; its headers by name.
    fn posted_to<'r>(request: &'r http::Request<()>, token: &str) -> impl Fn(&str) -> String + 'r {
        assert_eq!(request.method(), http::Method::POST);
        assert_eq!(
            request.uri().to_string(),
            format!("{ORIGIN}/3/device/{token}")
        );
        |name| request.headers()[name].to_str().unwrap().to_owned()
    }

    #[test]
    fn a_push_is_a_voip_post_at_priority_10_for_the_voip_topic() {
        let push = push();
        let token = "ab".repeat(32);
        let request = request(ORIGIN, VOIP_TOPIC, &push, &token, BEARER, 42).unwrap();
        let header = posted_to(&request, &token);
        assert_eq!(header("apns-push-type"), "voip");
        assert_eq!(header("apns-priority"), "10");
        assert_eq!(header("apns-topic"), VOIP_TOPIC);
        assert_eq!(
            header("apns-expiration"),
            push.expires_at.timestamp().to_string()
        );
        assert_eq!(header("authorization"), BEARER);
        assert_eq!(header("content-length"), "42");
        assert!(!request.headers().contains_key("apns-collapse-id"));
    }

    #[test]
    fn a_notice_is_an_alert_post_at_priority_10_for_the_bundle_id() {
        let now = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let at = crate::domain::reservation::ScheduledAt::parse(
            "scheduledAt",
            "2026-01-01T09:00:30+09:00",
            now,
        )
        .unwrap();
        let device = crate::domain::device::DeviceId::parse("deviceId", "d1").unwrap();
        let reservation =
            crate::domain::reservation::Reservation::new(device, at, Some("Mika".into()), now);
        let call = crate::domain::due::DueCall::from(&reservation);
        let push = AlertPush::for_call(&call, "unconfirmed");
        let token = "cd".repeat(32);
        let request = alert_request(ORIGIN, VOIP_TOPIC, &push, &token, BEARER, 42).unwrap();
        let header = posted_to(&request, &token);
        assert_eq!(header("apns-push-type"), "alert");
        assert_eq!(header("apns-priority"), "10");
        assert_eq!(header("apns-topic"), "com.example.koe");
        assert_eq!(
            header("apns-expiration"),
            (at.utc() + crate::push::NOTICE_LIFETIME)
                .timestamp()
                .to_string()
        );
        let body: serde_json::Value = serde_json::from_str(&push.to_json()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "aps": {
                    "alert": {"loc-key": "KOE_MISSED_CALL", "loc-args": ["Mika"]},
                    "sound": "default",
                },
                "callId": reservation.call_id.as_str(),
                "scheduledAt": "2026-01-01T09:00:30+09:00",
                "reason": "unconfirmed",
            })
        );
    }

    #[test]
    fn the_body_is_our_payload() {
        let body: serde_json::Value = serde_json::from_str(&push().to_json()).unwrap();
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
