//! Which push sender the dispatcher gets: a pool of APNs connections, or the logging sender;
//! for a deployed dispatcher whose APNs key is a managed secret, rebuilt when the key changes.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{App, Mode};
use crate::app::ports::Adapters;
use crate::domain::device::Device;
use crate::platform::config::{
    ApnsConfig, ApnsPoolConfig, ConfigError, PushSenderChoice, Secret, Vars,
};
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
        let push = build(&self.vars, self.mode, self.device_hash_salt()?)?;
        let key = self.secrets.live("APNS_KEY_P8", &self.vars);
        // A managed key (a deployed dispatcher's secret) may be stored or rotated while the
        // container lives: the sender follows it.
        let push: Arc<dyn PushSender> = if key.is_managed() {
            Arc::new(Rekeyed {
                vars: self.vars.clone(),
                mode: self.mode,
                salt: self.device_hash_salt()?,
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
fn build(vars: &Vars, mode: Mode, salt: String) -> Result<Arc<dyn PushSender>, ConfigError> {
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
        PushSenderChoice::Auto => ApnsConfig::from_vars(vars)?,
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
    key: LiveSecret,
    current: Mutex<(Option<Secret>, Arc<dyn PushSender>)>,
}

impl Rekeyed {
    fn sender(&self) -> Arc<dyn PushSender> {
        let key = self.key.current();
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.0 != key {
            match build(&self.vars, self.mode, self.salt.clone()) {
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
