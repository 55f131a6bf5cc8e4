//! No personal data in the dispatcher's logs: a run with sentinel values wherever personal data
//! goes (device id, VoIP token, caller name), through the real logging push sender and a token
//! APNs rejects (its call's missed-call notice logged to a sentinel alert token), and POST /internal/dispatch with sentinel ID tokens, while a trace-level capture
//! of everything the process logs is scanned. The logging sender's line must still say which call
//! went out when (`callId`, `sentAt` with milliseconds), the device only as its salted hash, and
//! the payload with the caller name only as its length.
//!
//! And koe-local's missed-call notice: a confirming device with an `alertToken` that never
//! confirms gets exactly one logged alert push after its last call push; one that confirms none.
//!
//! Its own test binary, so the capture sees only this binary's runs.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use async_trait::async_trait;
use chrono::{DateTime, Duration, FixedOffset, Utc};
use koe::dispatch::{Dispatcher, RunCause};
use koe::domain::device::{AlertToken, Device, PushEnvironment};
use koe::domain::due::DueCall;
use koe::domain::reservation::{CallId, Reservation};
use koe::platform::clock::{Clock, SystemClock};
use koe::platform::config::{Config, Vars};
use koe::push::log::{ALERT_MESSAGE, LogPushSender, MESSAGE};
use koe::push::{Notice, PushError, PushSender, VoipPush};
use koe::store::memory::MemoryStore;
use koe_testkit::dispatching::reserve_for;
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
/// The rejected device's alert token (hex, as a token must be).
const ALERT_HEX: &str = "a1e470cea1e470ce";

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
        ALERT_HEX.into(),
        ALERT_HEX.to_uppercase(),
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

    async fn send_notice(&self, notice: Notice<'_>) -> Result<(), PushError> {
        self.0.send_notice(notice).await
    }
}

async fn reserve(store: &MemoryStore, id: &str, token: &str, at: DateTime<Utc>) -> Reservation {
    let now = Utc::now();
    let mut device = koe_testkit::push::device(id, token, now);
    device.environment = PushEnvironment::Sandbox;
    device.alert_token = (id == REJECTED_DEVICE)
        .then(|| AlertToken::parse("alertToken", &ALERT_HEX.repeat(4)).unwrap());
    let at = at.with_timezone(&FixedOffset::east_opt(9 * 3600).unwrap());
    let caller = Some(CALLER.into());
    reserve_for(store, &device, at, caller, now, CallId::generate()).await
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
    // Its payload: what the phone gets, the caller name only as its length.
    let payload = |line: &serde_json::Value| -> serde_json::Value {
        serde_json::from_str(line["payload"].as_str().expect("a payload")).unwrap()
    };
    let caller_length = format!("<{} chars>", CALLER.chars().count());
    assert_eq!(
        payload(push_line),
        json!({"aps": {}, "callId": sent.call_id.as_str(), "attempt": 1,
            "callerName": caller_length, "scheduledAt": push_line_scheduled_at(&sent)})
    );
    assert!(
        lines.iter().any(|l| l["message"] == "dispatch push"
            && l["outcome"] == "failed"
            && l["call_id"] == rejected.call_id.as_str()),
        "the failure is logged (positive control)"
    );
    // The notice line: the call and why, nothing of the device or the caller.
    let notice = lines
        .iter()
        .find(|l| l["message"] == ALERT_MESSAGE && l["callId"] == rejected.call_id.as_str())
        .unwrap_or_else(|| panic!("a notice line in:\n{}", capture.contents()));
    assert_eq!(notice["callId"], rejected.call_id.as_str());
    assert_eq!(notice["reason"], "failed");
    assert!(notice.get("device").is_none(), "{notice}");
    let alert = payload(notice);
    assert_eq!(alert["aps"]["alert"]["loc-args"], json!([caller_length]));
    assert_eq!(alert["reason"], "failed");
    assert_eq!(report.notices_sent, 1, "{report:?}");

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

/// A reservation's `scheduledAt` as its pushes carry it.
fn push_line_scheduled_at(reservation: &Reservation) -> String {
    VoipPush::for_call(&DueCall::from(reservation), Utc::now(), 1).scheduled_at
}

/// The lines of `message` for `call_id` so far.
fn lines_of(capture: &LogCapture, message: &str, call_id: &str) -> Vec<serde_json::Value> {
    capture
        .lines()
        .into_iter()
        .filter(|l| l["message"] == message && l["callId"] == call_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn koe_local_logs_one_notice_after_the_last_push_of_a_call_never_confirmed() {
    let capture = logs::capture();
    let app = spawn_app(&[
        ("LOCAL_DISPATCHER", "true"),
        ("CALL_CONFIRM_WAIT_MS", "1000"),
        ("CALL_MAX_PUSHES", "2"),
    ])
    .await;
    let hex = || format!("{:032x}{:032x}", fastrand::u128(..), fastrand::u128(..));
    let at = (Utc::now() + Duration::milliseconds(10_700))
        .with_timezone(&FixedOffset::east_opt(9 * 3600).unwrap())
        .to_rfc3339();
    let mut calls = Vec::new();
    for device in ["local-never", "local-confirms"] {
        let body = json!({"deviceId": device, "voipToken": hex(), "alertToken": hex(), "confirmsCalls": true});
        let put = app
            .agent(http::Method::PUT, "/devices")
            .body(body.to_string());
        let put: serde_json::Value = put.send().await.unwrap().json().await.unwrap();
        let secret = put["deviceSecret"].as_str().unwrap().to_owned();
        let body = json!({"deviceId": device, "scheduledAt": at, "callerName": "Mika"});
        let post = app
            .agent(http::Method::POST, "/calls")
            .header("x-device-secret", &secret)
            .body(body.to_string());
        let created = post.send().await.unwrap();
        assert_eq!(created.status().as_u16(), 201, "{device}");
        let created: serde_json::Value = created.json().await.unwrap();
        calls.push((
            device,
            secret,
            created["callId"].as_str().unwrap().to_owned(),
        ));
    }
    let (never, confirms) = (&calls[0].2, &calls[1]);
    // The confirming phone confirms its first push once it is logged.
    let deadline = std::time::Instant::now() + StdDuration::from_secs(20);
    while lines_of(&capture, MESSAGE, &confirms.2).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            capture.contents()
        );
        tokio::time::sleep(StdDuration::from_millis(20)).await;
    }
    let body = json!({"deviceId": confirms.0, "callId": confirms.2});
    let confirm = app
        .agent(http::Method::POST, "/calls/confirm")
        .header("x-device-secret", &confirms.1)
        .body(body.to_string());
    assert_eq!(confirm.send().await.unwrap().status().as_u16(), 200);
    // The other: two pushes, then (the last wait over) one notice.
    while lines_of(&capture, ALERT_MESSAGE, never).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            capture.contents()
        );
        tokio::time::sleep(StdDuration::from_millis(20)).await;
    }
    tokio::time::sleep(StdDuration::from_millis(1500)).await;
    let pushes = lines_of(&capture, MESSAGE, never);
    let notices = lines_of(&capture, ALERT_MESSAGE, never);
    assert_eq!(
        (pushes.len(), notices.len()),
        (2, 1),
        "{}",
        capture.contents()
    );
    let time = |l: &serde_json::Value| l["sentAt"].as_str().unwrap().to_owned();
    assert!(time(&notices[0]) > time(&pushes[1]), "after its last push");
    assert_eq!(notices[0]["reason"], "unconfirmed");
    for leak in ["local-never", "Mika", "deviceId", "token"] {
        assert!(
            !notices[0].to_string().contains(leak),
            "{leak}: {}",
            notices[0]
        );
    }
    assert!(
        lines_of(&capture, ALERT_MESSAGE, &confirms.2).is_empty(),
        "a confirmed call has none"
    );
}
