//! Secrets of a deployed function: read from AWS Secrets Manager at cold start, kept fresh.
//!
//! In a deployed function no secret is an environment variable: each comes as
//! `<VAR>_SECRET_ARN`, the ARN of a Secrets Manager secret only that function's role may read
//! (template.yaml). [`Secrets::resolve`] reads them all at once at cold start; [`Secrets::over`]
//! lays them over the other variables, so the configuration reads `OPENAI_API_KEY` as before.
//! Each value is a [`LiveSecret`]: read again in the background once it is older than
//! [`REFRESH_EVERY`], and at once (at most every [`MIN_GAP`]) when a credential it holds was
//! refused (an unknown `X-Api-Key`, OpenAI's 401), so a rotation needs no deploy. Every read has
//! a deadline ([`START_READ_TIMEOUT`], [`READ_TIMEOUT`]) and holds the one-read-at-a-time slot
//! only while it runs: a read that fails, times out or is abandoned (a read stuck across a Lambda
//! freeze, a request that went away) leaves the next one possible. Local runs and tests set the
//! variables themselves; nothing is read then.

pub mod secretsmanager;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};

use crate::platform::clock::Clock;
use crate::platform::config::{ConfigError, Secret, Vars};

/// The variables that hold secrets, each with the variable a deployed function gets instead:
/// the ARN of its secret.
pub const SECRET_VARS: [(&str, &str); 5] = [
    ("OPENAI_API_KEY", "OPENAI_API_KEY_SECRET_ARN"),
    ("AGENT_API_KEYS", "AGENT_API_KEYS_SECRET_ARN"),
    ("APNS_KEY_P8", "APNS_KEY_P8_SECRET_ARN"),
    ("AGENT_STEP_KEY", "AGENT_STEP_KEY_SECRET_ARN"),
    ("DEVICE_HASH_SALT", "DEVICE_HASH_SALT_SECRET_ARN"),
];
/// What a secret the stack created holds until its value is set (template.yaml gives it as each
/// such secret's first value): read as not set.
pub const NOT_SET: &str = "not-set";
/// A value older than this is read again, in the background, when next used.
pub const REFRESH_EVERY: Duration = Duration::minutes(5);
/// Reads forced by a refused credential (or an empty value) are at least this far apart, so
/// a flood of bad keys cannot turn into a flood of Secrets Manager calls.
pub const MIN_GAP: Duration = Duration::seconds(30);
/// Deadline of one read once the function serves: a forced read (an unknown `X-Api-Key`) runs
/// inside the request, before its handler, within the request's deadline (`crate::platform::deadline`,
/// which also cuts it). GetSecretValue answers within tens of milliseconds in-region: one that
/// takes this long has failed (the value in hand stays in use, and the next read is due as
/// after any failure).
pub const READ_TIMEOUT: StdDuration = StdDuration::from_millis(500);
/// Deadline of the cold start's reads (all at once, before the first request, so outside every
/// request's budget): within Lambda's 10 s init phase with room for the rest of the init, and
/// above the SDK's 3.1 s connect timeout, so a slow first connection is retried once rather
/// than failing the start. A start that cannot read its secrets stops, naming the variable.
pub const START_READ_TIMEOUT: StdDuration = StdDuration::from_secs(5);

/// Reading a secret failed (names the secret's variable, never its value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SecretError(pub String);

/// Where secret values are read: Secrets Manager ([`secretsmanager`]), or a stand-in.
#[async_trait]
pub trait SecretSource: Send + Sync {
    /// The secret's current value (its `SecretString`; empty until it is set).
    async fn read(&self, arn: &str) -> Result<String, SecretError>;
}

/// A secret's value, which may change while the process runs.
#[derive(Clone)]
pub struct LiveSecret(Arc<Inner>);

struct Inner {
    var: &'static str,
    /// `None`: a fixed value (local runs), never read again.
    managed: Option<(String, Arc<dyn SecretSource>)>,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    /// Whether a read is in flight (one at a time): held only through a [`Slot`].
    reading: AtomicBool,
    /// Deadline of each read ([`READ_TIMEOUT`]; shorter in tests against a real socket).
    read_timeout: StdDuration,
}

/// The one read in flight. Given back when dropped, so a read that fails, times out or is
/// abandoned half-way (its future dropped) never keeps it.
struct Slot<'a>(&'a AtomicBool);

impl<'a> Slot<'a> {
    /// The slot, unless a read holds it.
    fn take(reading: &'a AtomicBool) -> Option<Slot<'a>> {
        (!reading.swap(true, Ordering::SeqCst)).then_some(Slot(reading))
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// One read of `arn`, failed if it takes longer than `timeout` (the read is dropped: a request
/// the SDK still had in flight is abandoned, its connection closed).
async fn read_within(
    source: &dyn SecretSource,
    arn: &str,
    timeout: StdDuration,
) -> Result<String, SecretError> {
    tokio::time::timeout(crate::platform::deadline::cap(timeout), source.read(arn))
        .await
        .unwrap_or_else(|_| {
            Err(SecretError(format!(
                "GetSecretValue gave no answer within {} ms",
                timeout.as_millis()
            )))
        })
}

struct State {
    value: Option<Secret>,
    read_at: DateTime<Utc>,
    forced_at: Option<DateTime<Utc>>,
}

impl LiveSecret {
    /// A value that never changes (an environment variable, or none).
    pub fn fixed(var: &'static str, value: Option<String>) -> LiveSecret {
        LiveSecret::build(
            var,
            None,
            value,
            Arc::new(crate::platform::clock::SystemClock),
        )
    }

    fn build(
        var: &'static str,
        managed: Option<(String, Arc<dyn SecretSource>)>,
        value: Option<String>,
        clock: Arc<dyn Clock>,
    ) -> LiveSecret {
        let read_at = clock.now();
        LiveSecret(Arc::new(Inner {
            var,
            managed,
            clock,
            state: Mutex::new(State {
                value: value.filter(|v| is_set(v)).map(Secret::new),
                read_at,
                forced_at: None,
            }),
            reading: AtomicBool::new(false),
            read_timeout: READ_TIMEOUT,
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the value comes from Secrets Manager (and so may change).
    pub fn is_managed(&self) -> bool {
        self.0.managed.is_some()
    }

    /// The value now (`None`: not set). A managed value older than [`REFRESH_EVERY`] (or
    /// empty, and not read in the last [`MIN_GAP`]) is read again in the background.
    pub fn current(&self) -> Option<Secret> {
        let (value, stale) = {
            let state = self.state();
            let age = self.0.clock.now() - state.read_at;
            let stale = age >= REFRESH_EVERY || (state.value.is_none() && age >= MIN_GAP);
            (state.value.clone(), stale)
        };
        if stale
            && self.0.managed.is_some()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let this = self.clone();
            runtime.spawn(async move { this.read_again().await });
        }
        value
    }

    /// A credential from this secret was refused: reads it again now (within [`READ_TIMEOUT`]),
    /// unless a read is in flight or a forced read began in the last [`MIN_GAP`] (whatever
    /// became of it: during an outage, a flood of bad keys costs one read per gap). Whether the
    /// value changed.
    pub async fn refused(&self) -> bool {
        if self.0.managed.is_none() {
            return false;
        }
        let Some(slot) = Slot::take(&self.0.reading) else {
            return false;
        };
        {
            let mut state = self.state();
            let now = self.0.clock.now();
            if state.forced_at.is_some_and(|t| now - t < MIN_GAP) {
                return false;
            }
            state.forced_at = Some(now);
        }
        self.read_holding(slot).await
    }

    /// A read in the background, unless one is in flight; whether the value changed.
    async fn read_again(&self) -> bool {
        match Slot::take(&self.0.reading) {
            Some(slot) => self.read_holding(slot).await,
            None => false,
        }
    }

    /// One read, `_slot` held until it ends (or is dropped); whether the value changed.
    async fn read_holding(&self, _slot: Slot<'_>) -> bool {
        let Some((arn, source)) = &self.0.managed else {
            return false;
        };
        let read = read_within(source.as_ref(), arn, self.0.read_timeout).await;
        let mut state = self.state();
        state.read_at = self.0.clock.now();
        match read {
            Ok(value) => {
                let value = Some(value)
                    .filter(|v| !v.trim().is_empty())
                    .map(Secret::new);
                let changed = value != state.value;
                if changed {
                    tracing::info!(secret = self.0.var, "secret changed: new value in use");
                }
                state.value = value;
                changed
            }
            Err(e) => {
                // The value in hand stays in use; the next read is due again later.
                tracing::warn!(secret = self.0.var, error = %e, "secret not read again");
                false
            }
        }
    }
}

/// Whether a secret's value is set: not empty, and not the stack's [`NOT_SET`].
fn is_set(value: &str) -> bool {
    let value = value.trim();
    !value.is_empty() && value != NOT_SET
}

/// The secrets of one process: the managed ones by variable.
#[derive(Clone, Default)]
pub struct Secrets(HashMap<&'static str, LiveSecret>);

impl Secrets {
    /// Reads every secret `vars` names by `<VAR>_SECRET_ARN`, all at once; a secret that
    /// cannot be read stops the start-up with an error naming its ARN variable.
    pub async fn resolve(
        vars: &Vars,
        source: Arc<dyn SecretSource>,
        clock: Arc<dyn Clock>,
    ) -> Result<Secrets, ConfigError> {
        let named: Vec<(&'static str, &'static str, String)> = SECRET_VARS
            .into_iter()
            .filter_map(|(var, arn_var)| vars.get(arn_var).map(|arn| (var, arn_var, arn)))
            .collect();
        let reads = named
            .iter()
            .map(|(_, _, arn)| read_within(source.as_ref(), arn, START_READ_TIMEOUT));
        let values = futures_util::future::join_all(reads).await;
        let mut secrets = HashMap::new();
        for ((var, arn_var, arn), value) in named.into_iter().zip(values) {
            let value = value.map_err(|e| ConfigError {
                var: arn_var,
                reason: format!("could not be read from Secrets Manager: {e}"),
            })?;
            let managed = Some((arn, source.clone()));
            secrets.insert(
                var,
                LiveSecret::build(var, managed, Some(value), clock.clone()),
            );
        }
        Ok(Secrets(secrets))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `var`'s live value: the managed secret, or `vars`' fixed value.
    pub fn live(&self, var: &'static str, vars: &Vars) -> LiveSecret {
        self.0
            .get(var)
            .cloned()
            .unwrap_or_else(|| LiveSecret::fixed(var, vars.get(var)))
    }

    /// `vars` with each managed secret's current value under its variable.
    pub fn over(&self, vars: Vars) -> Vars {
        let secrets = self.0.clone();
        Vars::from_fn(move |name| match secrets.get(name) {
            Some(secret) => secret.current().map(|s| s.expose().to_owned()),
            None => vars.get(name),
        })
    }
}

#[cfg(test)]
mod tests;
