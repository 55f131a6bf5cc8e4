//! No personal data in the dispatcher's logs: a run with sentinel values wherever personal data
//! goes (device id, VoIP token, caller name), through the real logging push sender and a token
//! APNs rejects, and POST /internal/dispatch with sentinel ID tokens, while a trace-level capture
//! of everything the process logs is scanned. The logging sender's line must still say which call
//! went out when (`callId`, `sentAt` with milliseconds), and the device only as its salted hash.
//!
//! Its own test binary, so the capture sees only this binary's runs.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use async_trait::async_trait;
use chrono::{DateTime, Duration, FixedOffset, Utc};
use koe::clock::{Clock, SystemClock};
use koe::config::{Config, Vars};
use koe::dispatch::{Dispatcher, RunCause};
use koe::domain::device::{Device, DeviceId, PushEnvironment, VoipToken};
use koe::domain::reservation::{Reservation, ScheduledAt};
use koe::push::log::{LogPushSender, MESSAGE};
use koe::push::{PushError, PushSender, VoipPush};
use koe::store::memory::MemoryStore;
use koe::store::prelude::*;
use koe_testkit::harness::spawn_app;
use koe_testkit::logs::{self, LogCapture};
use koe_testkit::oidc::{self, StandInIssuer, TestKey, claims_with};
use serde_json::json;

const DEVICE: &str = "SENTINEL-DEVICE-d15p";
const REJECTED_DEVICE: &str = "SENTINEL-DEVICE-b4d7";
const CALLER: &str = "SENTINEL-CALLER-9a7e";
const SALT: &str = "test-salt";
const TOKEN_SENTINEL: &str = "SENTINEL-IDTOKEN-77f1";
const EMAIL_SENTINEL: &str = "sentinel-email-3c2a@evil.test";

fn voip_token(tail: &str) -> String {
    format!("{tail}{}", "feedface".repeat(8))
}

fn forbidden() -> Vec<String> {
    vec![
        DEVICE.into(),
        "DEVICE-d15p".into(),
        REJECTED_DEVICE.into(),
        "DEVICE-b4d7".into(),
        CALLER.into(),
        "CALLER-9a7e".into(),
        "feedfacefeedface".into(),
        "FEEDFACEFEEDFACE".into(),
        TOKEN_SENTINEL.into(),
        EMAIL_SENTINEL.into(),
    ]
}

fn assert_no_sentinel(capture: &LogCapture, extra: &[String]) {
    capture.assert_none_of(forbidden().iter().chain(extra));
}

/// The real logging sender, except that APNs "rejects" one device's token.
struct LogExceptRejected(LogPushSender);

#[async_trait]
impl PushSender for LogExceptRejected {
    async fn send(&self, push: &VoipPush, device: &Device) -> Result<(), PushError> {
        if device.device_id.as_str() == REJECTED_DEVICE {
            return Err(PushError::InvalidToken {
                status: 410,
                reason: "Unregistered".into(),
            });
        }
        self.0.send(push, device).await
    }
}

async fn reserve(store: &MemoryStore, id: &str, token: &str, at: DateTime<Utc>) -> Reservation {
    let now = Utc::now();
    let device = Device {
        device_id: DeviceId::parse("deviceId", id).unwrap(),
        voip_token: VoipToken::parse("voipToken", token).unwrap(),
        environment: PushEnvironment::Sandbox,
        updated_at: now,
        confirms_calls: false,
        alert_token: None,
    };
    store.put_device(&device).await.unwrap();
    let jst = FixedOffset::east_opt(9 * 3600).unwrap();
    let r = Reservation::new(
        device.device_id,
        ScheduledAt::from_stored(at.with_timezone(&jst)),
        Some(CALLER.into()),
        now,
    );
    store
        .create_reservation(&r, now, now - Duration::seconds(150))
        .await
        .unwrap();
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatcher_and_dispatch_route_logs_carry_no_personal_data() {
    let capture = logs::capture();

    // A run: one push through the logging sender, one token APNs rejects.
    let store = Arc::new(MemoryStore::new());
    let second = Utc::now() + Duration::milliseconds(1200);
    let sent = reserve(&store, DEVICE, &voip_token("ab"), second).await;
    let rejected = reserve(&store, REJECTED_DEVICE, &voip_token("cd"), second).await;
    let mut settings = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    settings.window = StdDuration::from_secs(3);
    settings.reselect_every = StdDuration::from_millis(500);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let dispatcher = Dispatcher::new(
        store.clone(),
        Arc::new(LogExceptRejected(LogPushSender::new(SALT))),
        clock,
        settings,
        SALT,
    );
    let report = dispatcher.run(RunCause::Local).await;
    assert_eq!((report.sent, report.failed), (1, 1), "{report:?}");

    // The push line: which call, when (RFC 3339, milliseconds), the device only as its hash.
    let lines = capture.lines();
    let push_line = lines
        .iter()
        .find(|l| l["message"] == MESSAGE && l["callId"] == sent.call_id.as_str())
        .unwrap_or_else(|| panic!("a push line for the sent call in:\n{}", capture.contents()));
    let sent_at = push_line["sentAt"].as_str().unwrap();
    assert_eq!(sent_at.len(), "2026-01-01T00:00:00.000Z".len(), "{sent_at}");
    let sent_at = DateTime::parse_from_rfc3339(sent_at).unwrap();
    assert!(sent_at >= second - Duration::milliseconds(1), "never early");
    let hash = sent.device_id.log_hash(SALT);
    assert_eq!(push_line["device"], hash.as_str());
    assert!(
        lines.iter().any(|l| l["message"] == "dispatch push"
            && l["outcome"] == "failed"
            && l["call_id"] == rejected.call_id.as_str()),
        "the failure is logged (positive control)"
    );

    // The route: sentinel tokens and claims are refused and never logged.
    let issuer = StandInIssuer::start().await;
    let vars = issuer.vars();
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let app = spawn_app(&vars).await;
    let post = |authorization: String| {
        app.agent_unauthenticated(http::Method::POST, "/internal/dispatch")
            .header("authorization", authorization)
            .send()
    };
    let forged = oidc::mint(
        &claims_with(json!({"email": EMAIL_SENTINEL})),
        TestKey::One,
        Some(oidc::KID_1),
    );
    let valid = oidc::valid_token();
    for (authorization, status) in [
        (format!("Bearer {TOKEN_SENTINEL}"), 401),
        (format!("Bearer {forged}"), 401),
        (format!("Basic {TOKEN_SENTINEL}"), 401),
        (format!("Bearer {valid}"), 202),
    ] {
        assert_eq!(post(authorization).await.unwrap().status().as_u16(), status);
    }
    let signatures: Vec<String> = [&forged, &valid]
        .iter()
        .map(|t| t.rsplit('.').next().unwrap().to_owned())
        .collect();
    assert_no_sentinel(&capture, &signatures);
    assert!(
        capture
            .lines()
            .iter()
            .any(|l| l["message"] == "dispatch request refused"),
        "refusals are logged (positive control)"
    );
}
