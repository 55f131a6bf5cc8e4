//! APNs through a2 (token auth with the team's `.p8` key): topic `<bundle id>.voip`, push type
//! `voip`, priority 10, expiring [`CALL_PUSH_LIFETIME`](super::CALL_PUSH_LIFETIME) after it is
//! sent, to the endpoint of the device's environment.
//!
//! a2 cannot be pointed at anything but Apple's servers, so this adapter stays thin: it builds the
//! request ([`options`], [`ApnsPayload`]) and classifies a2's answer ([`classify`]); both are
//! unit-tested here, and the dispatcher's handling of each class is tested with a stand-in sender.

use a2::request::notification::{NotificationOptions, Priority, PushType};
use a2::request::payload::PayloadLike;
use a2::{Client, ClientConfig, Endpoint, ErrorReason};
use async_trait::async_trait;
use serde::Serialize;

use super::{PushError, PushSender, VoipPush};
use crate::config::ApnsConfig;
use crate::domain::device::{Device, PushEnvironment};

/// a2's own per-request timeout (whole seconds only). The dispatcher holds each push to a much
/// shorter budget; this only bounds a request the dispatcher has already given up on.
const REQUEST_TIMEOUT_SECS: u64 = 2;

/// One client per APNs environment, built once per container (each keeps its HTTP/2 connection
/// and its provider token, renewed lazily every 55 min).
pub struct ApnsSender {
    production: Client,
    sandbox: Client,
    topic: String,
}

impl ApnsSender {
    /// Builds both clients; the provider token is signed here, so a bad key fails now (at cold
    /// start), not at the first call.
    pub fn new(config: &ApnsConfig) -> Result<ApnsSender, a2::Error> {
        let client = |endpoint| {
            Client::token(
                config.key_pem.expose().as_bytes(),
                config.key_id.as_str(),
                config.team_id.as_str(),
                ClientConfig {
                    endpoint,
                    request_timeout_secs: Some(REQUEST_TIMEOUT_SECS),
                    pool_idle_timeout_secs: Some(600),
                },
            )
        };
        Ok(ApnsSender {
            production: client(Endpoint::Production)?,
            sandbox: client(Endpoint::Sandbox)?,
            topic: config.topic(),
        })
    }
}

/// The AlgorithmIdentifier of an EC P-256 key in PKCS#8 DER: id-ecPublicKey, prime256v1.
const P256_KEY_ALGORITHM: &[u8] = &[
    0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48,
    0xce, 0x3d, 0x03, 0x01, 0x07,
];

/// Checks that `pem` has the form of a `.p8` key: PKCS#8 DER (a SEQUENCE holding version 0 and
/// the EC P-256 algorithm) followed by the private key. No network, no cryptography: every
/// function validates its configuration at start-up, and signing with the key (a2 does, when the
/// dispatcher builds its clients) would cost every cold start tens of milliseconds and link a2's
/// TLS stack into every function. A key of this form that still cannot sign is reported when the
/// dispatcher starts.
pub fn check_key(pem: &str) -> Result<(), String> {
    use base64::Engine;
    let body: String = pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body.trim())
        .map_err(|_| "its body is not base64".to_owned())?;
    // SEQUENCE (long or short length), INTEGER 0, then the algorithm.
    let header = match der.get(1) {
        Some(0x81) => 3,
        Some(0x82) => 4,
        _ => 2,
    };
    let version_and_algorithm = der.get(header..header + 3 + P256_KEY_ALGORITHM.len());
    let expected: Vec<u8> = [&[0x02, 0x01, 0x00][..], P256_KEY_ALGORITHM].concat();
    if der.first() != Some(&0x30) || version_and_algorithm != Some(&expected[..]) {
        return Err("it is not a PKCS#8 EC P-256 private key".into());
    }
    // OCTET STRING { ECPrivateKey: SEQUENCE, INTEGER 1, OCTET STRING (32 bytes) ... }
    let rest = &der[header + expected.len()..];
    if rest.len() < 2 + 2 + 3 + 2 + 32 || rest[0] != 0x04 {
        return Err("its private key is missing or truncated".into());
    }
    Ok(())
}

/// The `.p8` key as PEM, from the PEM itself (real or `\n`-escaped line breaks, as a template
/// parameter may carry it) or from just its base64 body on one line.
pub fn normalize_p8(raw: &str) -> Result<String, &'static str> {
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

/// a2's answer as a [`PushError`] class. The status code decides first: a2 turns reasons it does
/// not know into `error: None`, so a 410 without a reason is still a dead token.
pub fn classify(result: Result<a2::Response, a2::Error>) -> Result<(), PushError> {
    let error = match result {
        Ok(_) => return Ok(()),
        Err(error) => error,
    };
    match error {
        a2::Error::ResponseError(response) => Err(classify_response(&response)),
        a2::Error::ConnectionError(_)
        | a2::Error::ClientError(_)
        | a2::Error::RequestTimeout(_) => Err(PushError::Retryable {
            status: None,
            reason: error.to_string(),
        }),
        other => Err(PushError::Rejected {
            status: None,
            reason: other.to_string(),
        }),
    }
}

fn classify_response(response: &a2::Response) -> PushError {
    let status = response.code;
    let reason = response
        .error
        .as_ref()
        .map(|body| format!("{:?}", body.reason))
        .unwrap_or_else(|| "(no reason APNs' client knows)".to_owned());
    let bad_token = response
        .error
        .as_ref()
        .is_some_and(|body| body.reason == ErrorReason::BadDeviceToken);
    match status {
        410 => PushError::InvalidToken { status, reason },
        400 if bad_token => PushError::InvalidToken { status, reason },
        429 | 500..=599 => PushError::Retryable {
            status: Some(status),
            reason,
        },
        _ => PushError::Rejected {
            status: Some(status),
            reason,
        },
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
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};

    use super::*;
    use crate::config::Secret;

    const TEST_P8: &str = include_str!("../../../testkit/keys/apns-test.p8");

    fn response(code: u16, reason: Option<ErrorReason>) -> Result<a2::Response, a2::Error> {
        Err(a2::Error::ResponseError(a2::Response {
            error: reason.map(|reason| a2::ErrorBody {
                reason,
                timestamp: None,
            }),
            apns_id: Some("00000000-0000-0000-0000-000000000000".into()),
            code,
        }))
    }

    fn push() -> VoipPush {
        VoipPush {
            aps: Default::default(),
            call_id: "c0ffee".into(),
            caller_name: Some("Mika".into()),
            scheduled_at: "2026-01-01T09:00:30+09:00".into(),
            expires_at: DateTime::parse_from_rfc3339("2026-01-01T00:01:00Z")
                .unwrap()
                .with_timezone(&Utc),
        }
    }

    #[test]
    fn accepted_is_ok() {
        let ok = Ok(a2::Response {
            error: None,
            apns_id: None,
            code: 200,
        });
        assert_eq!(classify(ok), Ok(()));
    }

    #[test]
    fn a_dead_token_is_invalid_by_status_first() {
        for (code, reason) in [
            (400, Some(ErrorReason::BadDeviceToken)),
            (410, Some(ErrorReason::Unregistered)),
            // An unknown reason (a2 parses it to None) on 410 is still a dead token.
            (410, None),
        ] {
            let err = classify(response(code, reason)).unwrap_err();
            assert!(
                matches!(err, PushError::InvalidToken { status, .. } if status == code),
                "{code}: {err:?}"
            );
        }
    }

    #[test]
    fn other_400s_are_rejected_not_a_reason_to_drop_the_token() {
        for reason in [
            Some(ErrorReason::BadTopic),
            Some(ErrorReason::PayloadTooLarge),
            None,
        ] {
            let err = classify(response(400, reason)).unwrap_err();
            assert!(
                matches!(
                    err,
                    PushError::Rejected {
                        status: Some(400),
                        ..
                    }
                ),
                "{err:?}"
            );
        }
        let err = classify(response(403, Some(ErrorReason::InvalidProviderToken))).unwrap_err();
        assert_eq!(
            err,
            PushError::Rejected {
                status: Some(403),
                reason: "InvalidProviderToken".into()
            }
        );
    }

    #[test]
    fn throttling_and_server_errors_are_retryable() {
        for (code, reason) in [
            (429, Some(ErrorReason::TooManyRequests)),
            (500, Some(ErrorReason::InternalServerError)),
            (503, Some(ErrorReason::ServiceUnavailable)),
            (503, None),
        ] {
            let err = classify(response(code, reason)).unwrap_err();
            assert!(
                matches!(err, PushError::Retryable { status: Some(s), .. } if s == code),
                "{code}: {err:?}"
            );
        }
        let timeout = classify(Err(a2::Error::RequestTimeout(2))).unwrap_err();
        assert!(matches!(timeout, PushError::Retryable { status: None, .. }));
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
                "callerName": "Mika",
                "scheduledAt": "2026-01-01T09:00:30+09:00",
            })
        );
        assert_eq!(payload.get_device_token(), token);
        assert!(!format!("{payload:?}").contains(&token));
    }

    #[test]
    fn the_p8_key_is_accepted_as_pem_escaped_pem_or_bare_base64() {
        let pem = normalize_p8(TEST_P8).unwrap();
        check_key(&pem).unwrap();
        let escaped = TEST_P8.replace('\n', "\\n");
        assert_eq!(normalize_p8(&escaped).unwrap(), pem);
        let bare: String = TEST_P8
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        assert_eq!(normalize_p8(&bare).unwrap(), pem);

        assert!(normalize_p8("").is_err());
        assert!(normalize_p8("not a key!").is_err());
        assert!(check_key(&normalize_p8("AAAA").unwrap()).is_err());
    }

    #[tokio::test]
    async fn a_sender_builds_from_the_test_key_with_the_voip_topic() {
        let config = ApnsConfig {
            key_pem: Secret::new(normalize_p8(TEST_P8).unwrap()),
            key_id: "ABCDE12345".into(),
            team_id: "TEAM123456".into(),
            bundle_id: "com.example.koe".into(),
        };
        let sender = ApnsSender::new(&config).unwrap();
        assert_eq!(sender.topic, "com.example.koe.voip");
    }
}
