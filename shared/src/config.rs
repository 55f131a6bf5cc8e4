//! Typed configuration, read from the environment once at start-up.
//!
//! Every variable is validated here; a bad value is a start-up error naming the variable. An empty
//! value counts as unset (SAM passes empty strings for blank parameters).

use std::collections::HashMap;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::store::TableNames;

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
    /// Model of round 1's planner call (`AGENT_PLANNER_MODEL`).
    pub planner_model: String,
    /// Model of round 2's responder call (`AGENT_RESPONDER_MODEL`).
    pub responder_model: String,
    /// The character's speaking style, the start of both agent prompts (`AGENT_PERSONA`).
    pub persona: String,
}

pub const DEFAULT_AGENT_MODEL: &str = "gpt-4o-mini";
/// Longest `AGENT_PERSONA`, in characters.
pub const MAX_PERSONA_CHARS: usize = 8000;

/// A model name as OpenAI-compatible APIs spell them (`gpt-4o-mini`, `ft:gpt-4o-mini:org::id`,
/// `meta-llama/Llama-3-8b`).
fn model_name(vars: &Vars, var: &'static str) -> Result<String, ConfigError> {
    let name = vars.string_or(var, DEFAULT_AGENT_MODEL).trim().to_owned();
    let valid = name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'/'));
    if valid {
        Ok(name)
    } else {
        Err(ConfigError {
            var,
            reason:
                "must be a model name of at most 128 letters, digits, '-', '_', '.', ':' or '/'"
                    .into(),
        })
    }
}

fn persona(vars: &Vars) -> Result<String, ConfigError> {
    let Some(persona) = vars.get("AGENT_PERSONA") else {
        return Ok(crate::agent::prompts::DEFAULT_PERSONA.to_owned());
    };
    if persona.chars().count() > MAX_PERSONA_CHARS {
        return Err(ConfigError {
            var: "AGENT_PERSONA",
            reason: format!("must be at most {MAX_PERSONA_CHARS} characters"),
        });
    }
    Ok(persona.trim().to_owned())
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchConfig {
    /// How late a reservation may still be sent; older ones become `missed`.
    pub grace: Duration,
    /// A claim older than this whose run never recorded an outcome counts as abandoned.
    pub claim_timeout: Duration,
    /// How far past its start a run covers, and so how long it lasts: the minute until the next
    /// run plus an overlap, so a next run that starts a few seconds late costs nothing.
    pub window: Duration,
    /// How often a run re-reads the time buckets it covers, to pick up reservations made after
    /// it started (they are at least 10 s ahead, so this must stay well below 10 s).
    pub reselect_every: Duration,
    /// How long before its second a reservation is claimed, so the store write is off the
    /// critical path. Also the cancel cut-off: a cancel later than this gets 409 TOO_LATE.
    pub claim_lead: Duration,
    /// How long a push may take from its second, retries included.
    pub push_budget: Duration,
    /// Claims and pushes in flight at once (`DISPATCH_CONCURRENCY`).
    pub concurrency: usize,
}

pub const DEFAULT_DISPATCH_WINDOW: Duration = Duration::from_secs(70);
pub const DEFAULT_DISPATCH_RESELECT_EVERY: Duration = Duration::from_secs(5);
pub const DEFAULT_DISPATCH_CLAIM_LEAD: Duration = Duration::from_millis(500);
pub const DEFAULT_DISPATCH_PUSH_BUDGET: Duration = Duration::from_secs(1);

/// APNs token authentication (`APNS_*`, all or none). Absent: pushes go to the logging sender.
///
/// The key is only carried here: the APNs adapter parses it when it is built (the dispatcher's
/// cold start, `koe::push::apns::ApnsSender::new`), so a function that sends no push neither
/// parses it nor fails on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApnsConfig {
    /// The `.p8` key as given (`APNS_KEY_P8`): its PEM text, with real or `\n`-escaped line
    /// breaks, or just the base64 between its BEGIN and END lines.
    pub key_p8: Secret,
    /// The key's 10-character id (`APNS_KEY_ID`).
    pub key_id: String,
    /// The developer team's 10-character id (`APNS_TEAM_ID`).
    pub team_id: String,
    /// The app's bundle id, without `.voip` (`APNS_BUNDLE_ID`).
    pub bundle_id: String,
}

impl ApnsConfig {
    /// The VoIP push topic: the app's bundle id plus `.voip`.
    pub fn topic(&self) -> String {
        format!("{}.voip", self.bundle_id)
    }
}

/// Who may call POST /internal/dispatch (`DISPATCH_OIDC_*`, all or none): an OIDC ID token from
/// `issuer`, for `audience`, of the service account `service_account`, signed by a key of
/// `jwks_url`. Absent: that route answers 401 to everyone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcConfig {
    pub jwks_url: String,
    pub issuer: String,
    pub audience: String,
    pub service_account: String,
}

/// Reads a group of variables that must be set together: `None` when none is set, a
/// [`ConfigError`] naming the first missing one when only some are.
fn all_or_none<const N: usize>(
    vars: &Vars,
    names: [&'static str; N],
) -> Result<Option<[String; N]>, ConfigError> {
    let values = names.map(|name| vars.get(name).map(|v| v.trim().to_owned()));
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

fn apns_from_vars(vars: &Vars) -> Result<Option<ApnsConfig>, ConfigError> {
    let Some([key, key_id, team_id, bundle_id]) = all_or_none(
        vars,
        [
            "APNS_KEY_P8",
            "APNS_KEY_ID",
            "APNS_TEAM_ID",
            "APNS_BUNDLE_ID",
        ],
    )?
    else {
        return Ok(None);
    };
    let key_p8 = Secret::new(key);
    let apple_id = |var: &'static str, value: String| {
        if value.len() == 10 && value.bytes().all(|b| b.is_ascii_alphanumeric()) {
            Ok(value)
        } else {
            Err(ConfigError {
                var,
                reason: "must be the 10-character identifier Apple shows".into(),
            })
        }
    };
    let valid_bundle = !bundle_id.is_empty()
        && !bundle_id.ends_with(".voip")
        && bundle_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'));
    if !valid_bundle {
        return Err(ConfigError {
            var: "APNS_BUNDLE_ID",
            reason: "must be the app's bundle id, e.g. com.example.koe (without .voip)".into(),
        });
    }
    Ok(Some(ApnsConfig {
        key_p8,
        key_id: apple_id("APNS_KEY_ID", key_id)?,
        team_id: apple_id("APNS_TEAM_ID", team_id)?,
        bundle_id,
    }))
}

fn oidc_from_vars(vars: &Vars) -> Result<Option<OidcConfig>, ConfigError> {
    let Some([jwks_url, issuer, audience, service_account]) = all_or_none(
        vars,
        [
            "DISPATCH_OIDC_JWKS_URL",
            "DISPATCH_OIDC_ISSUER",
            "DISPATCH_OIDC_AUDIENCE",
            "DISPATCH_OIDC_SERVICE_ACCOUNT",
        ],
    )?
    else {
        return Ok(None);
    };
    Ok(Some(OidcConfig {
        jwks_url: vars.url_or("DISPATCH_OIDC_JWKS_URL", &jwks_url)?,
        issuer,
        audience,
        service_account,
    }))
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
    /// APNs credentials; `None` sends pushes to the logging sender.
    pub apns: Option<ApnsConfig>,
    /// Callers of POST /internal/dispatch; `None` refuses every one.
    pub oidc: Option<OidcConfig>,
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
            planner_model: model_name(vars, "AGENT_PLANNER_MODEL")?,
            responder_model: model_name(vars, "AGENT_RESPONDER_MODEL")?,
            persona: persona(vars)?,
        };

        let dispatch = DispatchConfig {
            grace: Duration::from_secs(vars.int_or("DISPATCH_GRACE_SECS", 120, 0..=3600)?),
            claim_timeout: Duration::from_secs(vars.int_or(
                "DISPATCH_CLAIM_TIMEOUT_SECS",
                30,
                5..=600,
            )?),
            window: DEFAULT_DISPATCH_WINDOW,
            reselect_every: DEFAULT_DISPATCH_RESELECT_EVERY,
            claim_lead: DEFAULT_DISPATCH_CLAIM_LEAD,
            push_budget: DEFAULT_DISPATCH_PUSH_BUDGET,
            concurrency: vars.int_or("DISPATCH_CONCURRENCY", 500, 1..=5000)? as usize,
        };

        Ok(Config {
            openai,
            info,
            event_bus_name: vars.get("EVENT_BUS_NAME"),
            store,
            agent,
            dispatch,
            apns: apns_from_vars(vars)?,
            oidc: oidc_from_vars(vars)?,
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
    fn agent_models_and_persona_have_defaults_and_are_checked() {
        let config = Config::from_vars(&Vars::from_pairs(&[])).unwrap();
        assert_eq!(config.agent.planner_model, "gpt-4o-mini");
        assert_eq!(config.agent.responder_model, "gpt-4o-mini");
        assert_eq!(config.agent.persona, crate::agent::prompts::DEFAULT_PERSONA);
        let config = Config::from_vars(&Vars::from_pairs(&[
            ("AGENT_PLANNER_MODEL", "gpt-4o"),
            (
                "AGENT_RESPONDER_MODEL",
                "ft:gpt-4o-mini-2024-07-18:koe::abc123",
            ),
            ("AGENT_PERSONA", " You are Hal. "),
        ]))
        .unwrap();
        assert_eq!(config.agent.planner_model, "gpt-4o");
        assert_eq!(
            config.agent.responder_model,
            "ft:gpt-4o-mini-2024-07-18:koe::abc123"
        );
        assert_eq!(config.agent.persona, "You are Hal.");
        let long = "あ".repeat(MAX_PERSONA_CHARS + 1);
        for (var, value) in [
            ("AGENT_PLANNER_MODEL", "gpt 4o"),
            ("AGENT_RESPONDER_MODEL", "gpt-4o?x=1"),
            ("AGENT_PERSONA", long.as_str()),
        ] {
            let err = Config::from_vars(&Vars::from_pairs(&[(var, value)])).unwrap_err();
            assert_eq!(err.var, var, "{var}={value}");
        }
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

    const TEST_P8: &str = include_str!("../../testkit/keys/apns-test.p8");

    fn apns_vars(key: &str) -> Vec<(&'static str, String)> {
        vec![
            ("APNS_KEY_P8", key.to_owned()),
            ("APNS_KEY_ID", "ABCDE12345".to_owned()),
            ("APNS_TEAM_ID", "TEAM123456".to_owned()),
            ("APNS_BUNDLE_ID", "com.example.koe".to_owned()),
        ]
    }

    fn from(pairs: &[(&'static str, String)]) -> Result<Config, ConfigError> {
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Config::from_vars(&Vars::from_pairs(&pairs))
    }

    #[test]
    fn dispatch_defaults_are_the_production_timing() {
        let config = Config::from_vars(&Vars::from_pairs(&[])).unwrap();
        let d = &config.dispatch;
        assert_eq!(d.grace, Duration::from_secs(120));
        assert_eq!(d.claim_timeout, Duration::from_secs(30));
        assert_eq!(d.window, Duration::from_secs(70));
        assert_eq!(d.reselect_every, Duration::from_secs(5));
        assert!(d.claim_lead <= Duration::from_secs(1));
        assert_eq!(d.push_budget, Duration::from_secs(1));
        assert_eq!(d.concurrency, 500);
        assert_eq!(config.apns, None);
        assert_eq!(config.oidc, None);
        let err = Config::from_vars(&Vars::from_pairs(&[("DISPATCH_CONCURRENCY", "0")]));
        assert_eq!(err.unwrap_err().var, "DISPATCH_CONCURRENCY");
    }

    #[test]
    fn apns_is_all_or_none_with_apple_ids_and_a_bundle_id() {
        let config = from(&apns_vars(TEST_P8)).unwrap();
        let apns = config.apns.expect("APNs configured");
        assert_eq!(apns.topic(), "com.example.koe.voip");
        assert_eq!(apns.key_p8.expose(), TEST_P8.trim());
        assert!(
            !format!("{apns:?}").contains("BEGIN"),
            "the key never prints"
        );

        for missing in [
            "APNS_KEY_P8",
            "APNS_KEY_ID",
            "APNS_TEAM_ID",
            "APNS_BUNDLE_ID",
        ] {
            let partial: Vec<_> = apns_vars(TEST_P8)
                .into_iter()
                .filter(|(k, _)| *k != missing)
                .collect();
            assert_eq!(from(&partial).unwrap_err().var, missing);
        }
        // The key is carried, not parsed: its adapter parses it (push::apns).
        let carried = from(&apns_vars("AAAA"))
            .unwrap()
            .apns
            .expect("APNs configured");
        assert_eq!(carried.key_p8.expose(), "AAAA");
        for (var, value) in [
            ("APNS_KEY_ID", "short"),
            ("APNS_TEAM_ID", "TEAM-12345"),
            ("APNS_BUNDLE_ID", "com.example.koe.voip"),
            ("APNS_BUNDLE_ID", "com example"),
        ] {
            let mut vars = apns_vars(TEST_P8);
            vars.retain(|(k, _)| *k != var);
            vars.push((var, value.to_owned()));
            assert_eq!(from(&vars).unwrap_err().var, var, "{var}={value}");
        }
    }

    #[test]
    fn oidc_is_all_or_none_with_a_url_for_the_jwks() {
        let vars = |url: &str| {
            vec![
                ("DISPATCH_OIDC_JWKS_URL", url.to_owned()),
                (
                    "DISPATCH_OIDC_ISSUER",
                    "https://accounts.google.com".to_owned(),
                ),
                (
                    "DISPATCH_OIDC_AUDIENCE",
                    "https://koe.example/dispatch".to_owned(),
                ),
                (
                    "DISPATCH_OIDC_SERVICE_ACCOUNT",
                    "scheduler@koe.iam.gserviceaccount.com".to_owned(),
                ),
            ]
        };
        let oidc = from(&vars("https://www.googleapis.com/oauth2/v3/certs"))
            .unwrap()
            .oidc
            .expect("OIDC configured");
        assert_eq!(oidc.audience, "https://koe.example/dispatch");
        assert_eq!(
            from(&vars("not a url")).unwrap_err().var,
            "DISPATCH_OIDC_JWKS_URL"
        );
        let partial: Vec<_> = vars("https://x.example/certs")
            .into_iter()
            .filter(|(k, _)| *k != "DISPATCH_OIDC_AUDIENCE")
            .collect();
        assert_eq!(from(&partial).unwrap_err().var, "DISPATCH_OIDC_AUDIENCE");
    }
}
