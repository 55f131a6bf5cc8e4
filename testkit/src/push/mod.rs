//! A stand-in `PushSender`: records every push attempt with the (test) clock's time at the moment
//! it was made, and answers as scripted per device (accept, an APNs-like failure, or hang).
//! [`limited`] is a stand-in APNs with production's limits, for the push pool and its benchmark;
//! [`broken`] a loopback HTTP/2 server that breaks requests, for the APNs adapter's errors.

pub mod broken;
pub mod limited;
pub mod standin;
pub mod strict;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use koe::domain::device::{Device, DeviceId, PushEnvironment, VoipToken};
use koe::platform::clock::Clock;
use koe::push::{Notice, PushError, PushSender, VoipPush};

/// The APNs settings the tests sign with: the test key (`testkit/keys/apns-test.p8`), key id
/// `ABCDE12345`, team `TEAM123456`, bundle `com.example.koe`.
pub fn apns_config() -> koe::platform::config::ApnsConfig {
    koe::platform::config::ApnsConfig {
        key_p8: koe::platform::config::Secret::new(include_str!("../../keys/apns-test.p8")),
        key_id: "ABCDE12345".into(),
        team_id: "TEAM123456".into(),
        bundle_id: "com.example.koe".into(),
    }
}

/// The production APNs client to `addr` (plain HTTP/2, [`apns_config`]'s key) in a pool of
/// `APNS_MAX_CONNECTIONS`' default size, as `app::wiring::push` builds it for `APNS_ENDPOINT`.
pub fn production_pool(addr: std::net::SocketAddr) -> koe::push::pool::PushPool {
    use koe::push::pool::{PoolSettings, PushPool};
    let connections = koe::push::apns::ApnsSender::connections_at(&apns_config(), Some(addr))
        .expect("the test key");
    PushPool::new(
        connections,
        PoolSettings {
            max_connections: koe::platform::config::DEFAULT_APNS_MAX_CONNECTIONS,
            ..PoolSettings::default()
        },
    )
}

/// A call's first push, due at 07:00 JST, to device `device_id` (production APNs), for the
/// push pool's tests and benchmark.
pub fn push_and_device(call_id: &str, device_id: &str) -> (VoipPush, Device) {
    let now = Utc::now();
    let push = VoipPush {
        aps: Default::default(),
        call_id: call_id.into(),
        attempt: 1,
        caller_name: None,
        scheduled_at: "2026-01-01T07:00:00+09:00".into(),
        expires_at: now,
        leave_by: None,
        stream_by: None,
    };
    (push, device(device_id, &"ab".repeat(32), now))
}

/// The device `name` with the VoIP token `token` as registered at `at`: production APNs, one
/// push a call (it does not confirm calls), no alert token.
pub fn device(name: &str, token: &str, at: DateTime<Utc>) -> Device {
    Device {
        device_id: DeviceId::parse("deviceId", name).unwrap(),
        voip_token: VoipToken::parse("voipToken", token).unwrap(),
        environment: PushEnvironment::Production,
        updated_at: at,
        confirms_calls: false,
        alert_token: None,
    }
}

/// One push attempt as the sender saw it.
#[derive(Debug, Clone)]
pub struct RecordedPush {
    pub call_id: String,
    pub device_id: String,
    pub token: String,
    pub environment: PushEnvironment,
    /// The clock's time when the push was handed to the sender.
    pub at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// The JSON body the device would receive.
    pub payload: serde_json::Value,
    /// Whether the stand-in accepted it (a failed or hung attempt is recorded too).
    pub accepted: bool,
}

/// How the stand-in answers one attempt.
#[derive(Debug, Clone)]
pub enum Scripted {
    Accept,
    Fail(PushError),
    /// Never answers (the dispatcher must give up at its budget).
    Hang,
}

impl Scripted {
    /// APNs 400 `BadDeviceToken`.
    pub fn bad_device_token() -> Scripted {
        Scripted::Fail(PushError::InvalidToken {
            status: 400,
            reason: "BadDeviceToken".into(),
        })
    }

    /// APNs 410 `Unregistered`.
    pub fn unregistered() -> Scripted {
        Scripted::Fail(PushError::InvalidToken {
            status: 410,
            reason: "Unregistered".into(),
        })
    }

    /// APNs 429 `TooManyRequests`.
    pub fn too_many_requests() -> Scripted {
        Scripted::Fail(PushError::Retryable {
            status: Some(429),
            reason: "TooManyRequests".into(),
        })
    }

    /// APNs 500 `InternalServerError`.
    pub fn server_error() -> Scripted {
        Scripted::Fail(PushError::Retryable {
            status: Some(500),
            reason: "InternalServerError".into(),
        })
    }
}

pub struct RecordingPushSender {
    clock: Arc<dyn Clock>,
    attempts: Mutex<Vec<RecordedPush>>,
    /// The missed-call notices' attempts (alert pushes; `token` is the alert token).
    alerts: Mutex<Vec<RecordedPush>>,
    /// Per device id: the answers to its next attempts; afterwards, `Accept`.
    scripts: Mutex<HashMap<String, VecDeque<Scripted>>>,
    /// Real time each accepted push takes (as an APNs round trip would).
    latency: Mutex<Duration>,
}

impl RecordingPushSender {
    pub fn new(clock: Arc<dyn Clock>) -> RecordingPushSender {
        RecordingPushSender {
            clock,
            attempts: Mutex::new(Vec::new()),
            alerts: Mutex::new(Vec::new()),
            scripts: Mutex::new(HashMap::new()),
            latency: Mutex::new(Duration::ZERO),
        }
    }

    /// The next attempts for `device_id` get these answers, in order; then `Accept`.
    pub fn script(&self, device_id: &str, answers: impl IntoIterator<Item = Scripted>) {
        self.scripts
            .lock()
            .unwrap()
            .entry(device_id.to_owned())
            .or_default()
            .extend(answers);
    }

    /// The next alert pushes (missed-call notices) to `device_id` get these answers, in order;
    /// then `Accept`.
    pub fn script_alerts(&self, device_id: &str, answers: impl IntoIterator<Item = Scripted>) {
        self.script(&format!("alert:{device_id}"), answers);
    }

    /// Every alert push attempt so far (missed-call notices), in order.
    pub fn alert_attempts(&self) -> Vec<RecordedPush> {
        self.alerts.lock().unwrap().clone()
    }

    /// The accepted alert pushes of one call.
    pub fn alerts_for_call(&self, call_id: &str) -> Vec<RecordedPush> {
        self.alert_attempts()
            .into_iter()
            .filter(|p| p.accepted && p.call_id == call_id)
            .collect()
    }

    /// Every push takes this long in real time before it is answered.
    pub fn set_latency(&self, latency: Duration) {
        *self.latency.lock().unwrap() = latency;
    }

    /// Every attempt so far, in the order they were made.
    pub fn attempts(&self) -> Vec<RecordedPush> {
        self.attempts.lock().unwrap().clone()
    }

    /// The accepted pushes so far.
    pub fn sent(&self) -> Vec<RecordedPush> {
        self.attempts().into_iter().filter(|p| p.accepted).collect()
    }

    /// The accepted pushes of one call.
    pub fn sent_for_call(&self, call_id: &str) -> Vec<RecordedPush> {
        self.sent()
            .into_iter()
            .filter(|p| p.call_id == call_id)
            .collect()
    }

    /// Waits (real time, at most `timeout`) until `ready` holds for the attempts so far;
    /// panics naming `what` if it never does.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&[RecordedPush]) -> bool,
    ) -> Vec<RecordedPush> {
        let deadline = Instant::now() + timeout;
        loop {
            let attempts = self.attempts();
            if ready(&attempts) {
                return attempts;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; attempts so far: {attempts:#?}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

#[async_trait]
impl PushSender for RecordingPushSender {
    async fn send(&self, push: &VoipPush, device: &Device) -> Result<(), PushError> {
        let token = device.voip_token.expose();
        let recorded = self.attempt(device, token, &push.to_json(), push.expires_at);
        self.answer(device.device_id.as_str(), recorded, &self.attempts)
            .await
    }

    async fn send_notice(&self, notice: Notice<'_>) -> Result<(), PushError> {
        let (push, device, token) = (notice.push, notice.device, notice.token.expose());
        let recorded = self.attempt(device, token, &push.to_json(), push.expires_at);
        let key = format!("alert:{}", device.device_id.as_str());
        self.answer(&key, recorded, &self.alerts).await
    }
}

impl RecordingPushSender {
    /// An attempt (not yet accepted) of the push `payload` (JSON, with its `callId`) to
    /// `device`'s `token`, made now.
    fn attempt(
        &self,
        device: &Device,
        token: &str,
        payload: &str,
        expires_at: DateTime<Utc>,
    ) -> RecordedPush {
        let payload: serde_json::Value = serde_json::from_str(payload).expect("payload is JSON");
        RecordedPush {
            call_id: payload["callId"].as_str().expect("a call id").to_owned(),
            device_id: device.device_id.as_str().to_owned(),
            token: token.to_owned(),
            environment: device.environment,
            at: self.clock.now(),
            expires_at,
            payload,
            accepted: false,
        }
    }

    /// Answers an attempt as scripted for `key`, recording it into `log`.
    async fn answer(
        &self,
        key: &str,
        mut recorded: RecordedPush,
        log: &Mutex<Vec<RecordedPush>>,
    ) -> Result<(), PushError> {
        let answer = self
            .scripts
            .lock()
            .unwrap()
            .get_mut(key)
            .and_then(VecDeque::pop_front)
            .unwrap_or(Scripted::Accept);
        match answer {
            Scripted::Accept => {
                recorded.accepted = true;
                log.lock().unwrap().push(recorded);
                let latency = *self.latency.lock().unwrap();
                if !latency.is_zero() {
                    tokio::time::sleep(latency).await;
                }
                Ok(())
            }
            Scripted::Fail(error) => {
                log.lock().unwrap().push(recorded);
                Err(error)
            }
            Scripted::Hang => {
                log.lock().unwrap().push(recorded);
                std::future::pending().await
            }
        }
    }
}
