//! The agent API's section: its keys, daily limit, device-secret switch, log-hash salt, models
//! and persona.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{ConfigError, Secret, Vars};

/// The default character (`AGENT_PERSONA` unset): Koe's warm, brief voice-call companion,
/// speaking Japanese. Both agent prompts start with it.
pub const DEFAULT_PERSONA: &str = "\
あなたは「こえ」。音声通話アプリ「Koe」で、ユーザーと電話でおしゃべりする相棒のキャラクターです。

話し方:
- やさしく温かい、親しい友だちのような話し言葉。基本はやわらかいタメ口で、押しつけがましくしない。
- 一人称は「わたし」。相手の名前を知らなければ「あなた」と呼ぶ。
- 返事はそのまま音声で読み上げられる。1〜3文、だいたい80文字以内に短くまとめる。
- 絵文字、顔文字、記号、箇条書き、マークダウン、URLは使わない。
- 日付や時刻は耳で聞いて分かる言い方にする（例:「あしたの午後3時から」）。
- まず相手の気持ちを受け止めてから要点を伝え、必要なら最後に短い問いかけで会話をつなぐ。
- 分からないことは正直に言い、作り話をしない。
- 相手が日本語以外で話しかけてきたら、その言語で同じ雰囲気のまま答える。";

pub const DEFAULT_AGENT_MODEL: &str = "gpt-4o-mini";
/// Longest `AGENT_PERSONA`, in characters.
pub const MAX_PERSONA_CHARS: usize = 8000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    pub api_keys: ApiKeys,
    /// Round-1 agent calls per device per JST day.
    pub daily_limit: u32,
    /// Round 1 only for a registered device presenting its proven `X-Device-Secret`
    /// (`AGENT_REQUIRE_DEVICE_SECRET`, default false: docs/security.md, "The agent's daily
    /// limit and device ids").
    pub require_device_secret: bool,
    /// Salt of the device-id hashes in logs.
    pub device_hash_salt: String,
    /// Model of round 1's planner call (`AGENT_PLANNER_MODEL`).
    pub planner_model: String,
    /// Model of round 2's responder call (`AGENT_RESPONDER_MODEL`).
    pub responder_model: String,
    /// The character's speaking style, the start of both agent prompts (`AGENT_PERSONA`).
    pub persona: String,
    /// Key of round 1's signed step ids (`AGENT_STEP_KEY`, at least 32 characters). `None`:
    /// the agent function does not start (koe-local supplies a development key).
    pub step_key: Option<Secret>,
}

impl AgentConfig {
    /// `AGENT_API_KEYS`, `AGENT_DAILY_LIMIT` (default 50), `AGENT_REQUIRE_DEVICE_SECRET`
    /// (default false), `DEVICE_HASH_SALT`, `AGENT_PLANNER_MODEL`, `AGENT_RESPONDER_MODEL`, `AGENT_PERSONA` and `AGENT_STEP_KEY`.
    pub fn from_vars(vars: &Vars) -> Result<AgentConfig, ConfigError> {
        Ok(AgentConfig {
            api_keys: ApiKeys::parse(vars.get("AGENT_API_KEYS").as_deref()),
            daily_limit: vars.int_or("AGENT_DAILY_LIMIT", 50, 1..=100_000)? as u32,
            require_device_secret: vars.bool_or("AGENT_REQUIRE_DEVICE_SECRET", false)?,
            device_hash_salt: vars.string_or("DEVICE_HASH_SALT", "koe"),
            planner_model: model_name(vars, "AGENT_PLANNER_MODEL")?,
            responder_model: model_name(vars, "AGENT_RESPONDER_MODEL")?,
            persona: persona(vars)?,
            step_key: step_key(vars)?,
        })
    }
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

/// Shortest `AGENT_STEP_KEY`: 32 characters (the stack generates 64).
pub const MIN_STEP_KEY_CHARS: usize = 32;

fn step_key(vars: &Vars) -> Result<Option<Secret>, ConfigError> {
    let Some(key) = vars.get("AGENT_STEP_KEY") else {
        return Ok(None);
    };
    if key.trim().chars().count() < MIN_STEP_KEY_CHARS {
        return Err(ConfigError {
            var: "AGENT_STEP_KEY",
            reason: format!("must be at least {MIN_STEP_KEY_CHARS} characters"),
        });
    }
    Ok(Some(Secret::new(key.trim())))
}

fn persona(vars: &Vars) -> Result<String, ConfigError> {
    let Some(persona) = vars.get("AGENT_PERSONA") else {
        return Ok(DEFAULT_PERSONA.to_owned());
    };
    if persona.chars().count() > MAX_PERSONA_CHARS {
        return Err(ConfigError {
            var: "AGENT_PERSONA",
            reason: format!("must be at most {MAX_PERSONA_CHARS} characters"),
        });
    }
    Ok(persona.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::config::testing::{each_names_its_variable, reads_only};

    const OWN: &[&str] = &[
        "AGENT_API_KEYS",
        "AGENT_DAILY_LIMIT",
        "AGENT_REQUIRE_DEVICE_SECRET",
        "DEVICE_HASH_SALT",
        "AGENT_PLANNER_MODEL",
        "AGENT_RESPONDER_MODEL",
        "AGENT_PERSONA",
        "AGENT_STEP_KEY",
    ];

    fn from(pairs: &[(&str, &str)]) -> Result<AgentConfig, ConfigError> {
        AgentConfig::from_vars(&Vars::from_pairs(pairs))
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
    fn the_daily_limit_and_salt_have_defaults_and_are_checked() {
        let agent = from(&[]).unwrap();
        assert_eq!(agent.daily_limit, 50);
        assert_eq!(agent.device_hash_salt, "koe");
        assert!(agent.api_keys.is_empty());
        for value in ["0", "100001", "many"] {
            let err = from(&[("AGENT_DAILY_LIMIT", value)]).unwrap_err();
            assert_eq!(err.var, "AGENT_DAILY_LIMIT", "{value}");
        }
    }

    #[test]
    fn the_device_secret_switch_is_off_by_default_and_checked() {
        assert!(!from(&[]).unwrap().require_device_secret);
        for (value, on) in [
            ("true", true),
            ("1", true),
            ("false", false),
            (" 0 ", false),
        ] {
            let agent = from(&[("AGENT_REQUIRE_DEVICE_SECRET", value)]).unwrap();
            assert_eq!(agent.require_device_secret, on, "{value}");
        }
        for value in ["yes", "on", "enabled"] {
            let err = from(&[("AGENT_REQUIRE_DEVICE_SECRET", value)]).unwrap_err();
            assert_eq!(err.var, "AGENT_REQUIRE_DEVICE_SECRET", "{value:?}");
            assert!(err.to_string().contains("AGENT_REQUIRE_DEVICE_SECRET"));
        }
    }

    #[test]
    fn agent_models_and_persona_have_defaults_and_are_checked() {
        let agent = from(&[]).unwrap();
        assert_eq!(agent.planner_model, "gpt-4o-mini");
        assert_eq!(agent.responder_model, "gpt-4o-mini");
        assert_eq!(agent.persona, DEFAULT_PERSONA);
        let agent = from(&[
            ("AGENT_PLANNER_MODEL", "gpt-4o"),
            (
                "AGENT_RESPONDER_MODEL",
                "ft:gpt-4o-mini-2024-07-18:koe::abc123",
            ),
            ("AGENT_PERSONA", " You are Hal. "),
        ])
        .unwrap();
        assert_eq!(agent.planner_model, "gpt-4o");
        assert_eq!(
            agent.responder_model,
            "ft:gpt-4o-mini-2024-07-18:koe::abc123"
        );
        assert_eq!(agent.persona, "You are Hal.");
        let long = "あ".repeat(MAX_PERSONA_CHARS + 1);
        each_names_its_variable(
            &[
                ("AGENT_PLANNER_MODEL", "gpt 4o"),
                ("AGENT_RESPONDER_MODEL", "gpt-4o?x=1"),
                ("AGENT_PERSONA", long.as_str()),
            ],
            AgentConfig::from_vars,
        );
    }

    #[test]
    fn the_step_key_is_optional_secret_and_long_enough() {
        assert_eq!(from(&[]).unwrap().step_key, None);
        let key = "k".repeat(MIN_STEP_KEY_CHARS);
        let agent = from(&[("AGENT_STEP_KEY", key.as_str())]).unwrap();
        assert_eq!(agent.step_key, Some(Secret::new(key.clone())));
        assert!(!format!("{agent:?}").contains(&key));
        let short = "k".repeat(MIN_STEP_KEY_CHARS - 1);
        let err = from(&[("AGENT_STEP_KEY", short.as_str())]).unwrap_err();
        assert_eq!(err.var, "AGENT_STEP_KEY");
    }

    #[test]
    fn reads_only_its_own_variables() {
        reads_only(OWN, AgentConfig::from_vars).unwrap();
    }
}
