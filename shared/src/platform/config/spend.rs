//! The spend guard's section: a ceiling of model tokens per Japan day for each public API
//! (`CHAT_DAILY_TOKEN_CEILING`, `AGENT_DAILY_TOKEN_CEILING`).

use super::{ConfigError, Vars};

/// Default ceiling of each API: 5 million tokens a day (at most about $50 a day even if every
/// token were a gpt-4o output token, $10 per million; about $3 on gpt-4o-mini).
pub const DEFAULT_DAILY_TOKEN_CEILING: u64 = 5_000_000;
/// Highest ceiling accepted (10 billion tokens: no ceiling in practice).
pub const MAX_DAILY_TOKEN_CEILING: u64 = 10_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpendConfig {
    /// Model tokens per Japan day for `POST /api/chat`, all callers together.
    pub chat_daily_tokens: u64,
    /// Model tokens per Japan day for `POST /agent` (both rounds), all devices together.
    pub agent_daily_tokens: u64,
}

impl SpendConfig {
    /// `CHAT_DAILY_TOKEN_CEILING` and `AGENT_DAILY_TOKEN_CEILING` (1000 to 10 billion, default
    /// 5 million each).
    pub fn from_vars(vars: &Vars) -> Result<SpendConfig, ConfigError> {
        let ceiling = |var| {
            vars.int_or(
                var,
                DEFAULT_DAILY_TOKEN_CEILING,
                1000..=MAX_DAILY_TOKEN_CEILING,
            )
        };
        Ok(SpendConfig {
            chat_daily_tokens: ceiling("CHAT_DAILY_TOKEN_CEILING")?,
            agent_daily_tokens: ceiling("AGENT_DAILY_TOKEN_CEILING")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::config::testing::reads_only;

    const OWN: &[&str] = &["CHAT_DAILY_TOKEN_CEILING", "AGENT_DAILY_TOKEN_CEILING"];

    #[test]
    fn ceilings_have_defaults_and_are_checked() {
        let spend = SpendConfig::from_vars(&Vars::from_pairs(&[])).unwrap();
        assert_eq!(spend.chat_daily_tokens, 5_000_000);
        assert_eq!(spend.agent_daily_tokens, 5_000_000);
        let spend = SpendConfig::from_vars(&Vars::from_pairs(&[
            ("CHAT_DAILY_TOKEN_CEILING", "20000000"),
            ("AGENT_DAILY_TOKEN_CEILING", "1000"),
        ]))
        .unwrap();
        assert_eq!(spend.chat_daily_tokens, 20_000_000);
        assert_eq!(spend.agent_daily_tokens, 1000);
        for var in OWN {
            for value in ["0", "999", "lots", "10000000001"] {
                let err = SpendConfig::from_vars(&Vars::from_pairs(&[(var, value)])).unwrap_err();
                assert_eq!(err.var, *var, "{var}={value}");
            }
        }
    }

    #[test]
    fn reads_only_its_own_variables() {
        reads_only(OWN, SpendConfig::from_vars).unwrap();
    }
}
