//! Which push sender the dispatcher gets: a pool of APNs connections, or the logging sender;
//! for a deployed dispatcher whose APNs key is a managed secret, rebuilt when the key changes.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{App, Mode};
use crate::app::ports::Adapters;
use crate::domain::device::Device;
use crate::platform::clock::Clock;
use crate::platform::config::{
    ApnsConfig, ApnsPoolConfig, ConfigError, PushSenderChoice, Secret, Vars,
};
use crate::platform::metrics::catalogue::DISPATCH;
use crate::platform::metrics::{Metrics, Record};
use crate::platform::secrets::LiveSecret;
use crate::push::apns::ApnsSender;
use crate::push::log::LogPushSender;
use crate::push::pool::{PoolSettings, PushPool};
use crate::push::{Notice, PushError, PushSender, VoipPush};

impl App {
    /// The push sender: APNs when `APNS_*` is set; the logging sender when `PUSH_SENDER=log`,
    /// or (`PUSH_SENDER=auto`) until an APNs key is stored, or locally without `APNS_*` (a
    /// Lambda with `PUSH_SENDER=apns` and no key refuses to start).
    pub fn push(&self) -> Result<Arc<dyn PushSender>, ConfigError> {
        if let Some(push) = self.push.get() {
            return Ok(push.clone());
        }
        let reports = Reports {
            metrics: self.metrics(),
            clock: self.clock.clone(),
        };
        let push = build(&self.vars, self.mode, self.device_hash_salt()?, &reports)?;
        let key = self.secrets.live("APNS_KEY_P8", &self.vars);
        // A managed key (a deployed dispatcher's secret) may be stored or rotated while the
        // container lives: the sender follows it.
        let push: Arc<dyn PushSender> = if key.is_managed() {
            Arc::new(Rekeyed {
                vars: self.vars.clone(),
                mode: self.mode,
                salt: self.device_hash_salt()?,
                reports,
                key: key.clone(),
                current: Mutex::new((key.current(), push)),
            })
        } else {
            push
        };
        Ok(self.push.get_or_init(|| push).clone())
    }
}

/// The sender `vars` ask for. A bad key fails here, at the dispatcher's start-up: it is parsed
/// as the signing key. A Lambda with `PUSH_SENDER=apns` and no APNs refuses to start: a
/// stack that silently rings nobody is worse than one that fails.
///
/// With `PUSH_SENDER=auto`, a stored key whose ids are not all set (yet) or not valid is a step
/// of docs/deploy.md half done, not a reason to stop every dispatch container: the logging
/// sender runs, and its start and its pushes only logged (at most once a minute) say so as an
/// error and write `ApnsConfigIncomplete` (the `dispatch-apns-config` alarm pages).
fn build(
    vars: &Vars,
    mode: Mode,
    salt: String,
    reports: &Reports,
) -> Result<Arc<dyn PushSender>, ConfigError> {
    let choice = PushSenderChoice::from_vars(vars)?;
    let apns = match choice {
        PushSenderChoice::Apns => ApnsConfig::from_vars(vars)?,
        // Until the key is stored, the rest of APNS_* alone is no APNs.
        PushSenderChoice::Auto if vars.get("APNS_KEY_P8").is_none() => {
            tracing::warn!(
                "PUSH_SENDER=auto and no APNs key stored yet: pushes are only logged, nothing \
                 rings (docs/deploy.md, 'APNs key')"
            );
            None
        }
        PushSenderChoice::Auto => match ApnsConfig::from_vars(vars) {
            Ok(apns) => apns,
            Err(incomplete) => {
                let sender = Incomplete {
                    logged: LogPushSender::new(salt),
                    reports: reports.clone(),
                    why: incomplete.to_string(),
                    reported: Mutex::new(None),
                };
                sender.report_now();
                return Ok(Arc::new(sender));
            }
        },
        PushSenderChoice::Log => None,
    };
    match apns {
        // A pool of connections, as many as a second needs: to Apple, or to `APNS_ENDPOINT`.
        Some(apns) => {
            let pool = ApnsPoolConfig::from_vars(vars)?;
            Ok(Arc::new(PushPool::new(
                ApnsSender::connections_at(&apns, pool.endpoint)?,
                PoolSettings {
                    max_connections: pool.max_connections,
                    ..PoolSettings::default()
                },
            )))
        }
        None if mode == Mode::Lambda && choice == PushSenderChoice::Apns => Err(ConfigError {
            var: "APNS_KEY_P8",
            reason: "APNS_* is not set: the dispatcher would ring nobody; store the APNs key \
                     and set ApnsKeyId, ApnsTeamId, ApnsBundleId, or PUSH_SENDER=auto or log \
                     (parameter PushSender) to only log pushes until then"
                .into(),
        }),
        None => {
            if mode == Mode::Lambda {
                tracing::warn!("pushes are only logged, nothing rings");
            }
            Ok(Arc::new(LogPushSender::new(salt)))
        }
    }
}

/// A deployed dispatcher's sender, rebuilt from the APNs key secret when its value changes (it
/// is read again every few minutes, `crate::platform::secrets`): a key stored after the first deploy, or
/// rotated, is in use without a deploy. A key that does not build leaves the sender as it was.
struct Rekeyed {
    vars: Vars,
    mode: Mode,
    salt: String,
    reports: Reports,
    key: LiveSecret,
    current: Mutex<(Option<Secret>, Arc<dyn PushSender>)>,
}

impl Rekeyed {
    fn sender(&self) -> Arc<dyn PushSender> {
        let key = self.key.current();
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.0 != key {
            match build(&self.vars, self.mode, self.salt.clone(), &self.reports) {
                Ok(sender) => {
                    tracing::info!("APNs key changed: push sender rebuilt");
                    *current = (key, sender);
                }
                Err(e) => {
                    tracing::error!(error = %e, "APNs key changed but does not build: kept the sender in use");
                    current.0 = key;
                }
            }
        }
        current.1.clone()
    }
}

#[async_trait]
impl PushSender for Rekeyed {
    async fn send(&self, push: &VoipPush, device: &Device) -> Result<(), PushError> {
        self.sender().send(push, device).await
    }

    async fn send_notice(&self, notice: Notice<'_>) -> Result<(), PushError> {
        self.sender().send_notice(notice).await
    }

    async fn warm(&self) {
        self.sender().warm().await
    }

    async fn prepare(&self, expected_in_second: usize) {
        self.sender().prepare(expected_in_second).await
    }
}

/// Where a sender's configuration problems are reported: the process's metrics, at its clock.
#[derive(Clone)]
struct Reports {
    metrics: Metrics,
    clock: Arc<dyn Clock>,
}

/// The logging sender of a dispatcher whose APNs key is stored (`PUSH_SENDER=auto`) and whose
/// other APNs settings are missing or wrong: it keeps the dispatcher running and says, when it
/// starts and then at most once a minute while it only logs pushes, that nothing rang (once a
/// minute keeps the alarm's one-minute periods in ALARM without a record per push).
struct Incomplete {
    logged: LogPushSender,
    reports: Reports,
    /// The configuration error (names the variable, never a value of the key).
    why: String,
    /// When it last reported.
    reported: Mutex<Option<chrono::DateTime<chrono::Utc>>>,
}

impl Incomplete {
    fn report_now(&self) {
        let now = self.reports.clock.now();
        let mut reported = self.reported.lock().unwrap_or_else(|p| p.into_inner());
        if reported.is_some_and(|at| now - at < chrono::Duration::minutes(1)) {
            return;
        }
        *reported = Some(now);
        drop(reported);
        self.report(now);
    }

    fn report(&self, now: chrono::DateTime<chrono::Utc>) {
        tracing::error!(
            error = %self.why,
            "PUSH_SENDER=auto: the APNs key is stored but the APNs settings are incomplete: \
             pushes are only logged, nothing rings; set ApnsKeyId, ApnsTeamId and ApnsBundleId \
             and deploy (docs/deploy.md, 'Production and the APNs key')"
        );
        let metrics = &self.reports.metrics;
        metrics.emit(&incomplete_record(metrics.function(), now));
    }
}

#[async_trait]
impl PushSender for Incomplete {
    async fn send(&self, push: &VoipPush, device: &Device) -> Result<(), PushError> {
        self.report_now();
        self.logged.send(push, device).await
    }

    async fn send_notice(&self, notice: Notice<'_>) -> Result<(), PushError> {
        self.logged.send_notice(notice).await
    }
}

/// What a dispatcher writes at its start and, at most once a minute, while it only logs pushes
/// because `PUSH_SENDER=auto` has a stored key and incomplete APNs settings (the
/// `dispatch-apns-config` alarm's metric).
pub fn incomplete_record(function: &str, at: chrono::DateTime<chrono::Utc>) -> Record {
    Record::new(DISPATCH, at)
        .dimension("Function", function)
        .count("ApnsConfigIncomplete", 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::metrics::MemorySink;
    use chrono::{DateTime, Utc};

    /// A clock the test moves.
    struct At(Mutex<DateTime<Utc>>);

    #[async_trait]
    impl Clock for At {
        fn now(&self) -> DateTime<Utc> {
            *self.0.lock().unwrap()
        }

        async fn sleep_until(&self, _deadline: DateTime<Utc>) {}
    }

    #[tokio::test]
    async fn an_incomplete_apns_configuration_logs_pushes_and_reports_once_a_minute() {
        let start: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
        let clock = Arc::new(At(Mutex::new(start)));
        let sink = MemorySink::default();
        let reports = Reports {
            metrics: Metrics::new(Arc::new(sink.clone()), "koe-dispatch"),
            clock: clock.clone(),
        };
        let vars = Vars::from_pairs(&[("PUSH_SENDER", "auto"), ("APNS_KEY_P8", "a stored key")]);
        let sender = build(&vars, Mode::Lambda, "salt".into(), &reports).expect("it starts");
        let reported = || {
            sink.lines()
                .iter()
                .filter(|l| l.contains("ApnsConfigIncomplete"))
                .count()
        };
        assert_eq!(reported(), 1, "at its start");
        let (push, device) = crate::push::pool::tests::push_and_device();
        for _ in 0..3 {
            sender.send(&push, &device).await.expect("logged");
        }
        assert_eq!(reported(), 1, "within its first minute: no record per push");
        *clock.0.lock().unwrap() = start + chrono::Duration::seconds(61);
        sender.send(&push, &device).await.expect("logged");
        sender.send(&push, &device).await.expect("logged");
        assert_eq!(reported(), 2, "a minute later, once more");
    }
}
