//! Typed configuration, one section per port, each read from the environment once at start-up.
//!
//! Every variable is validated by its section; a bad value is a start-up error naming the
//! variable. An empty value counts as unset (SAM passes empty strings for blank parameters).
//!
//! Each section's `from_vars` reads only that section's variables, so a process (or an adapter)
//! that needs one section is not stopped by another's bad value. [`Config`] composes them all
//! for the processes that use everything (koe-local, the tests). This module is the lowest layer
//! of the crate: it imports nothing from it, and the adapters import their sections from here.
//! [`Vars::from_env`] is the crate's only reader of the process environment.

use std::collections::HashMap;

use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;

pub mod agent;
pub mod apns;
pub mod aws;
pub mod dispatch;
pub mod events;
pub mod info;
pub mod lambda;
pub mod log;
pub mod oidc;
pub mod openai;
pub mod spend;
pub mod store;

pub use agent::{AgentConfig, ApiKeys, DEFAULT_AGENT_MODEL, DEFAULT_PERSONA, MAX_PERSONA_CHARS};
pub use apns::{ApnsConfig, ApnsPoolConfig, DEFAULT_APNS_MAX_CONNECTIONS, PushSenderChoice};
pub use aws::AwsConfig;
pub use dispatch::{
    DEFAULT_DISPATCH_CLAIM_LEAD, DEFAULT_DISPATCH_PUSH_BUDGET, DEFAULT_DISPATCH_RESELECT_EVERY,
    DEFAULT_DISPATCH_WINDOW, DispatchConfig,
};
pub use events::EventsConfig;
pub use info::InfoConfig;
pub use lambda::LambdaConfig;
pub use log::LogConfig;
pub use oidc::OidcConfig;
pub use openai::{
    DEFAULT_OPENAI_BASE_URL, DEFAULT_PROVIDER_TIMEOUT_MS, MAX_PROVIDER_TIMEOUT_MS, OpenAiConfig,
};
pub use spend::{DEFAULT_DAILY_TOKEN_CEILING, SpendConfig};
pub use store::{StoreConfig, StoreKind, TableNames};

/// A secret value: usable through [`Secret::expose`], never printed, zeroed in memory when
/// dropped.
///
/// A thin wrapper over `secrecy`'s [`SecretString`] (which does the zeroing and the redaction)
/// rather than that type itself, for one reason: secrecy leaves out `PartialEq` on purpose, and
/// the sections holding secrets ([`OpenAiConfig`], [`ApnsConfig`], and so [`Config`]) compare
/// whole in tests. Ours compares in constant time. [`ExposeSecret`] works on it too.
#[derive(Clone)]
pub struct Secret(SecretString);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(SecretString::from(value.into()))
    }

    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

impl ExposeSecret<str> for Secret {
    fn expose_secret(&self) -> &str {
        self.expose()
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        self.expose()
            .as_bytes()
            .ct_eq(other.expose().as_bytes())
            .into()
    }
}

impl Eq for Secret {}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {var} {reason}")]
pub struct ConfigError {
    pub var: &'static str,
    pub reason: String,
}

/// Where variables come from: the process environment, or a map in tests. Cheap to clone.
#[derive(Clone)]
pub struct Vars(std::sync::Arc<Lookup>);

type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

impl Vars {
    /// The process environment: the one place the crate reads it.
    pub fn from_env() -> Vars {
        Vars(std::sync::Arc::new(|name| std::env::var(name).ok()))
    }

    pub fn from_map(map: HashMap<String, String>) -> Vars {
        Vars(std::sync::Arc::new(move |name| map.get(name).cloned()))
    }

    pub fn from_pairs(pairs: &[(&str, &str)]) -> Vars {
        Vars::from_map(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    /// Variables looked up by `lookup` (a test's recorder, say).
    pub fn from_fn(lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Vars {
        Vars(std::sync::Arc::new(lookup))
    }

    /// These variables, with `var` reading `value` (koe-local's defaults).
    pub fn with(self, var: &'static str, value: &'static str) -> Vars {
        let inner = self.0;
        Vars(std::sync::Arc::new(move |name| {
            if name == var {
                Some(value.to_owned())
            } else {
                inner(name)
            }
        }))
    }

    /// The variable's value, `None` when unset or empty.
    pub fn get(&self, var: &str) -> Option<String> {
        (self.0)(var).filter(|v| !v.trim().is_empty())
    }

    pub fn string_or(&self, var: &str, default: &str) -> String {
        self.get(var).unwrap_or_else(|| default.to_owned())
    }

    pub fn bool_or(&self, var: &'static str, default: bool) -> Result<bool, ConfigError> {
        match self.get(var).as_deref().map(str::trim) {
            None => Ok(default),
            Some("true" | "1" | "TRUE" | "True") => Ok(true),
            Some("false" | "0" | "FALSE" | "False") => Ok(false),
            Some(_) => Err(ConfigError {
                var,
                reason: "must be true or false".into(),
            }),
        }
    }

    pub fn int_or(
        &self,
        var: &'static str,
        default: u64,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<u64, ConfigError> {
        let Some(raw) = self.get(var) else {
            return Ok(default);
        };
        match raw.trim().parse::<u64>() {
            Ok(n) if range.contains(&n) => Ok(n),
            _ => Err(ConfigError {
                var,
                reason: format!(
                    "must be an integer from {} to {}",
                    range.start(),
                    range.end()
                ),
            }),
        }
    }

    pub fn url_or(&self, var: &'static str, default: &str) -> Result<String, ConfigError> {
        let value = self.string_or(var, default);
        match reqwest::Url::parse(&value) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => Ok(value),
            _ => Err(ConfigError {
                var,
                reason: "must be an http(s) URL".into(),
            }),
        }
    }

    /// A group of variables that must be set together, trimmed: `None` when none is set, a
    /// [`ConfigError`] naming the first missing one when only some are.
    pub fn all_or_none<const N: usize>(
        &self,
        names: [&'static str; N],
    ) -> Result<Option<[String; N]>, ConfigError> {
        let values = names.map(|name| self.get(name).map(|v| v.trim().to_owned()));
        if values.iter().all(Option::is_none) {
            return Ok(None);
        }
        if let Some(missing) = names.iter().zip(&values).find(|(_, v)| v.is_none()) {
            return Err(ConfigError {
                var: missing.0,
                reason: format!(
                    "must be set together with {} (all or none)",
                    names.join(", ")
                ),
            });
        }
        Ok(Some(values.map(|v| v.expect("checked above"))))
    }
}

/// Every section the app uses, for the processes that use them all (koe-local, the tests).
/// Logging ([`LogConfig`]) and the Lambdas' AWS clients ([`AwsConfig`]) read their own sections
/// where they are set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub openai: OpenAiConfig,
    pub info: InfoConfig,
    /// The EventBridge bus for error notifications; unset means notifications are only logged
    /// ([`EventsConfig::bus_name`]).
    pub event_bus_name: Option<String>,
    pub store: StoreConfig,
    pub agent: AgentConfig,
    pub dispatch: DispatchConfig,
    /// APNs credentials; `None` sends pushes to the logging sender.
    pub apns: Option<ApnsConfig>,
    /// Callers of POST /internal/dispatch; `None` refuses every one.
    pub oidc: Option<OidcConfig>,
    /// What the Lambda service says about the running function.
    pub lambda: LambdaConfig,
    /// The daily token ceilings of the public APIs.
    pub spend: SpendConfig,
}

impl Config {
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_vars(&Vars::from_env())
    }

    pub fn from_vars(vars: &Vars) -> Result<Config, ConfigError> {
        // Read where the push pool is built; checked here too, so a bad value (an
        // `APNS_ENDPOINT` off this machine) stops start-up.
        let pool = ApnsPoolConfig::from_vars(vars)?;
        let apns = ApnsConfig::from_vars(vars)?;
        if pool.endpoint.is_some() && apns.is_none() {
            // A server to push to and no key to sign with: pushes would only be logged, and
            // nothing would say why.
            return Err(ConfigError {
                var: "APNS_ENDPOINT",
                reason: "is set, but pushes to it need the APNs key values too: set \
                         APNS_KEY_P8, APNS_KEY_ID, APNS_TEAM_ID and APNS_BUNDLE_ID"
                    .into(),
            });
        }
        Ok(Config {
            openai: OpenAiConfig::from_vars(vars)?,
            info: InfoConfig::from_vars(vars)?,
            event_bus_name: EventsConfig::from_vars(vars).bus_name,
            store: StoreConfig::from_vars(vars)?,
            agent: AgentConfig::from_vars(vars)?,
            dispatch: DispatchConfig::from_vars(vars)?,
            apns,
            oidc: OidcConfig::from_vars(vars)?,
            lambda: LambdaConfig::from_vars(vars),
            spend: SpendConfig::from_vars(vars)?,
        })
    }
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests {
    use super::*;
    use testing::each_names_its_variable;

    #[test]
    fn bad_values_name_their_variable() {
        let cases = [
            ("MAINTENANCE_MODE", "yes"),
            ("MINIMUM_VERSION", "v1"),
            ("PROVIDER_TIMEOUT_MS", "60000"),
            ("PROVIDER_TIMEOUT_MS", "soon"),
            ("OPENAI_BASE_URL", "ftp://example.com"),
            ("OPENAI_BASE_URL", "not a url"),
            ("STORE", "postgres"),
            ("AGENT_DAILY_LIMIT", "0"),
            ("DISPATCH_GRACE_SECS", "-1"),
        ];
        each_names_its_variable(&cases, Config::from_vars);
    }

    #[test]
    fn defaults_need_no_variables() {
        let config = Config::from_vars(&Vars::from_pairs(&[])).unwrap();
        assert_eq!(config.event_bus_name, None);
        assert_eq!(config.lambda, LambdaConfig::default());
        assert_eq!(config.apns, None);
        assert_eq!(config.oidc, None);
    }

    #[test]
    fn the_whole_reads_every_section_and_nothing_else() {
        let sections = testing::variables_read(|vars| {
            let _ = OpenAiConfig::from_vars(vars);
            let _ = InfoConfig::from_vars(vars);
            let _ = EventsConfig::from_vars(vars);
            let _ = StoreConfig::from_vars(vars);
            let _ = AgentConfig::from_vars(vars);
            let _ = DispatchConfig::from_vars(vars);
            let _ = ApnsConfig::from_vars(vars);
            let _ = ApnsPoolConfig::from_vars(vars);
            let _ = OidcConfig::from_vars(vars);
            let _ = LambdaConfig::from_vars(vars);
            let _ = SpendConfig::from_vars(vars);
        });
        let whole = testing::variables_read(|vars| {
            let _ = Config::from_vars(vars);
        });
        assert_eq!(whole, sections);
    }

    #[test]
    fn secrets_do_not_print_and_compare_by_value() {
        let secret = Secret::new("sk-sentinel");
        assert!(!format!("{secret:?}").contains("sentinel"));
        assert_eq!(secret.expose(), "sk-sentinel");
        assert_eq!(secret.expose_secret(), "sk-sentinel");
        assert_eq!(secret, Secret::new(String::from("sk-sentinel")));
        assert_ne!(secret, Secret::new("sk-sentinel2"));
        assert_ne!(secret, Secret::new("sk-sentinem"));
    }

    #[test]
    fn a_group_is_all_or_none() {
        let vars = Vars::from_pairs(&[("A", " a "), ("B", "b")]);
        assert_eq!(vars.all_or_none(["C", "D"]), Ok(None));
        assert_eq!(
            vars.all_or_none(["A", "B"]),
            Ok(Some(["a".to_owned(), "b".to_owned()]))
        );
        assert_eq!(vars.all_or_none(["A", "C"]).unwrap_err().var, "C");
    }
}
