//! Which push sender the dispatcher gets: a pool of APNs connections, or the logging sender.

use std::sync::Arc;

use super::{App, Mode};
use crate::config::{ApnsConfig, ApnsPoolConfig, ConfigError, PushSenderChoice};
use crate::endpoints::Adapters;
use crate::push::PushSender;
use crate::push::apns::ApnsSender;
use crate::push::log::LogPushSender;
use crate::push::pool::{PoolSettings, PushPool};

impl App {
    /// The push sender: APNs when `APNS_*` is set; the logging sender when `PUSH_SENDER=log`,
    /// or locally without `APNS_*` (a Lambda without either refuses to start).
    pub fn push(&self) -> Result<Arc<dyn PushSender>, ConfigError> {
        if let Some(push) = self.push.get() {
            return Ok(push.clone());
        }
        // A bad key fails here, at the dispatcher's start-up: a2 parses it and signs a token.
        // A Lambda without APNs refuses to start unless the logging sender is asked for
        // (PUSH_SENDER=log): a stack that silently rings nobody is worse than one that fails.
        let choice = PushSenderChoice::from_vars(&self.vars)?;
        let apns = match choice {
            PushSenderChoice::Apns => ApnsConfig::from_vars(&self.vars)?,
            PushSenderChoice::Log => None,
        };
        let push: Arc<dyn PushSender> = match apns {
            // A pool of connections (each its own a2 client), as many as a second needs.
            Some(apns) => Arc::new(PushPool::new(
                ApnsSender::connections(&apns)?,
                PoolSettings {
                    max_connections: ApnsPoolConfig::from_vars(&self.vars)?.max_connections,
                    ..PoolSettings::default()
                },
            )),
            None if self.mode == Mode::Lambda && choice == PushSenderChoice::Apns => {
                return Err(ConfigError {
                    var: "APNS_KEY_P8",
                    reason: "APNS_* is not set: the dispatcher would ring nobody; set APNS_* \
                             (stack parameters ApnsKeyP8, ApnsKeyId, ApnsTeamId, ApnsBundleId), \
                             or PUSH_SENDER=log (parameter PushSender) to only log pushes"
                        .into(),
                });
            }
            None => {
                if self.mode == Mode::Lambda {
                    tracing::warn!("PUSH_SENDER=log: pushes are only logged, nothing rings");
                }
                Arc::new(LogPushSender::new(self.device_hash_salt()?))
            }
        };
        Ok(self.push.get_or_init(|| push).clone())
    }
}
