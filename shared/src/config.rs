//! Typed configuration, read from the environment once at start-up.
//!
//! Every variable is validated here; a bad value is a start-up error naming the variable. An empty
//! value counts as unset (SAM passes empty strings for blank parameters).

use std::collections::HashMap;
use std::time::Duration;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::store::TableNames;

/// A secret value: usable, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub var: &'static str,
    pub reason: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid configuration: {} {}", self.var, self.reason)
    }
}

impl std::error::Error for ConfigError {}

/// Where variables come from: the process environment, or a map in tests.
pub struct Vars(Box<Lookup>);

type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

impl Vars {
    pub fn from_env() -> Vars {
        Vars(Box::new(|name| std::env::var(name).ok()))
    }

    pub fn from_map(map: HashMap<String, String>) -> Vars {
        Vars(Box::new(move |name| map.get(name).cloned()))
    }

    pub fn from_pairs(pairs: &[(&str, &str)]) -> Vars {
        Vars::from_map(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
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
}

pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
pub const DEFAULT_PROVIDER_TIMEOUT_MS: u64 = 25_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    pub base_url: String,
    /// `None` is allowed: chat and agent then answer 500 PROVIDER_NOT_CONFIGURED.
    pub api_key: Option<Secret>,
    /// Total time budget of one completion, retry included.
    pub budget: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoConfig {
    pub maintenance: bool,
    pub minimum_version: String,
    pub message: Option<String>,
}

/// The agent API's keys (`AGENT_API_KEYS`, comma-separated, so keys rotate without downtime).
/// Only SHA-256 digests are kept; a presented key is hashed and compared with every digest in
/// constant time, so neither timing nor length tells anything about a key.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKeys(Vec<[u8; 32]>);

impl ApiKeys {
    pub fn parse(list: Option<&str>) -> ApiKeys {
        ApiKeys(
            list.unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(|k| Sha256::digest(k.as_bytes()).into())
                .collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when `presented` equals one of the keys.
    pub fn accepts(&self, presented: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented).into();
        let mut matched = subtle::Choice::from(0);
        for key in &self.0 {
            matched |= key.ct_eq(&digest);
        }
        matched.into()
    }
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} keys)", self.0.len())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Memory,
    DynamoDb,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    pub kind: StoreKind,
    pub tables: TableNames,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    pub api_keys: ApiKeys,
    /// Round-1 agent calls per device per JST day.
    pub daily_limit: u32,
    /// Salt of the device-id hashes in logs.
    pub device_hash_salt: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchConfig {
    /// How late a reservation may still be sent; older ones become `missed`.
    pub grace: Duration,
    /// A claim older than this whose run never recorded an outcome counts as abandoned.
    pub claim_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub openai: OpenAiConfig,
    pub info: InfoConfig,
    /// The EventBridge bus for error notifications; unset means notifications are only logged.
    pub event_bus_name: Option<String>,
    pub store: StoreConfig,
    pub agent: AgentConfig,
    pub dispatch: DispatchConfig,
}

fn is_version(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    (1..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 9 && p.bytes().all(|b| b.is_ascii_digit()))
}

impl Config {
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_vars(&Vars::from_env())
    }

    pub fn from_vars(vars: &Vars) -> Result<Config, ConfigError> {
        let openai = OpenAiConfig {
            base_url: vars.url_or("OPENAI_BASE_URL", DEFAULT_OPENAI_BASE_URL)?,
            api_key: vars.get("OPENAI_API_KEY").map(Secret::new),
            budget: Duration::from_millis(vars.int_or(
                "PROVIDER_TIMEOUT_MS",
                DEFAULT_PROVIDER_TIMEOUT_MS,
                100..=29_000,
            )?),
        };

        let minimum_version = vars.string_or("MINIMUM_VERSION", "1.0.0");
        if !is_version(&minimum_version) {
            return Err(ConfigError {
                var: "MINIMUM_VERSION",
                reason: "must be a version like 1.2.3".into(),
            });
        }
        let info = InfoConfig {
            maintenance: vars.bool_or("MAINTENANCE_MODE", false)?,
            minimum_version,
            message: vars.get("INFO_MESSAGE"),
        };

        let store = StoreConfig {
            kind: match vars.get("STORE").as_deref().map(str::trim) {
                None | Some("memory") => StoreKind::Memory,
                Some("dynamodb") => StoreKind::DynamoDb,
                Some(_) => {
                    return Err(ConfigError {
                        var: "STORE",
                        reason: "must be memory or dynamodb".into(),
                    });
                }
            },
            tables: TableNames {
                devices: vars.string_or("DEVICES_TABLE", "devices"),
                calls: vars.string_or("CALLS_TABLE", "scheduledCalls"),
                usage: vars.string_or("AGENT_USAGE_TABLE", "agentUsage"),
            },
        };

        let agent = AgentConfig {
            api_keys: ApiKeys::parse(vars.get("AGENT_API_KEYS").as_deref()),
            daily_limit: vars.int_or("AGENT_DAILY_LIMIT", 50, 1..=100_000)? as u32,
            device_hash_salt: vars.string_or("DEVICE_HASH_SALT", "koe"),
        };

        let dispatch = DispatchConfig {
            grace: Duration::from_secs(vars.int_or("DISPATCH_GRACE_SECS", 120, 0..=3600)?),
            claim_timeout: Duration::from_secs(vars.int_or(
                "DISPATCH_CLAIM_TIMEOUT_SECS",
                30,
                5..=600,
            )?),
        };

        Ok(Config {
            openai,
            info,
            event_bus_name: vars.get("EVENT_BUS_NAME"),
            store,
            agent,
            dispatch,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_need_no_variables() {
        let config = Config::from_vars(&Vars::from_pairs(&[])).unwrap();
        assert_eq!(config.openai.base_url, DEFAULT_OPENAI_BASE_URL);
        assert_eq!(config.openai.api_key, None);
        assert_eq!(config.openai.budget, Duration::from_secs(25));
        assert_eq!(
            config.info,
            InfoConfig {
                maintenance: false,
                minimum_version: "1.0.0".into(),
                message: None
            }
        );
        assert_eq!(config.event_bus_name, None);
    }

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
        for (var, value) in cases {
            let err = Config::from_vars(&Vars::from_pairs(&[(var, value)])).unwrap_err();
            assert_eq!(err.var, var, "{var}={value}");
            assert!(err.to_string().contains(var));
        }
    }

    #[test]
    fn empty_values_count_as_unset() {
        let config = Config::from_vars(&Vars::from_pairs(&[
            ("INFO_MESSAGE", ""),
            ("OPENAI_API_KEY", ""),
            ("MAINTENANCE_MODE", "true"),
        ]))
        .unwrap();
        assert_eq!(config.info.message, None);
        assert_eq!(config.openai.api_key, None);
        assert!(config.info.maintenance);
    }

    #[test]
    fn api_keys_accept_each_listed_key_and_nothing_else() {
        let keys = ApiKeys::parse(Some(" old-key-1234 ,new-key-5678,, "));
        assert!(keys.accepts(b"old-key-1234"));
        assert!(keys.accepts(b"new-key-5678"));
        for wrong in [
            &b""[..],
            b"old-key-123",
            b"old-key-12345",
            b"new-key-5678 ",
            b"OLD-KEY-1234",
        ] {
            assert!(!keys.accepts(wrong), "{wrong:?}");
        }
        assert!(ApiKeys::parse(None).is_empty());
        assert!(!ApiKeys::parse(None).accepts(b""));
        assert!(!format!("{keys:?}").contains("key-"));
    }

    #[test]
    fn store_and_tables_default_to_memory_and_the_spec_names() {
        let config = Config::from_vars(&Vars::from_pairs(&[])).unwrap();
        assert_eq!(config.store.kind, StoreKind::Memory);
        assert_eq!(config.store.tables, TableNames::default());
        assert_eq!(config.agent.daily_limit, 50);
        let config = Config::from_vars(&Vars::from_pairs(&[("STORE", "dynamodb")])).unwrap();
        assert_eq!(config.store.kind, StoreKind::DynamoDb);
    }

    #[test]
    fn secrets_do_not_print() {
        let secret = Secret::new("sk-sentinel");
        assert!(!format!("{secret:?}").contains("sentinel"));
    }
}
