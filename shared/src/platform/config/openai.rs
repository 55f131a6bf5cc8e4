//! The model provider's section: OpenAI or a compatible server (`OPENAI_*`, `PROVIDER_TIMEOUT_MS`).

use std::time::Duration;

use super::{ConfigError, Secret, Vars};

pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
pub const DEFAULT_PROVIDER_TIMEOUT_MS: u64 = 25_000;
/// Highest `PROVIDER_TIMEOUT_MS`: with the counters and a notification it fits the chat and
/// agent functions' timeout (`crate::app::budgets`), and it is the template's `MaxValue`.
pub const MAX_PROVIDER_TIMEOUT_MS: u64 = 25_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    pub base_url: String,
    /// `None` is allowed: chat and agent then answer 500 PROVIDER_NOT_CONFIGURED.
    pub api_key: Option<Secret>,
    /// Total time budget of one completion, retry included.
    pub budget: Duration,
}

impl OpenAiConfig {
    /// `OPENAI_BASE_URL`, `OPENAI_API_KEY` and `PROVIDER_TIMEOUT_MS` (100 to 25,000 ms, see
    /// [`MAX_PROVIDER_TIMEOUT_MS`]).
    pub fn from_vars(vars: &Vars) -> Result<OpenAiConfig, ConfigError> {
        Ok(OpenAiConfig {
            base_url: vars.url_or("OPENAI_BASE_URL", DEFAULT_OPENAI_BASE_URL)?,
            api_key: vars.get("OPENAI_API_KEY").map(Secret::new),
            budget: Duration::from_millis(vars.int_or(
                "PROVIDER_TIMEOUT_MS",
                DEFAULT_PROVIDER_TIMEOUT_MS,
                100..=MAX_PROVIDER_TIMEOUT_MS,
            )?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::config::testing::{each_names_its_variable, reads_only};

    const OWN: &[&str] = &["OPENAI_BASE_URL", "OPENAI_API_KEY", "PROVIDER_TIMEOUT_MS"];

    #[test]
    fn defaults_need_no_variables() {
        let openai = OpenAiConfig::from_vars(&Vars::from_pairs(&[])).unwrap();
        assert_eq!(openai.base_url, DEFAULT_OPENAI_BASE_URL);
        assert_eq!(openai.api_key, None);
        assert_eq!(openai.budget, Duration::from_secs(25));
    }

    #[test]
    fn bad_values_name_their_variable() {
        each_names_its_variable(
            &[
                ("PROVIDER_TIMEOUT_MS", "60000"),
                ("PROVIDER_TIMEOUT_MS", "25001"),
                ("PROVIDER_TIMEOUT_MS", "99"),
                ("PROVIDER_TIMEOUT_MS", "soon"),
                ("OPENAI_BASE_URL", "ftp://example.com"),
                ("OPENAI_BASE_URL", "not a url"),
            ],
            OpenAiConfig::from_vars,
        );
    }

    #[test]
    fn an_empty_key_counts_as_unset_and_a_key_does_not_print() {
        let vars = Vars::from_pairs(&[("OPENAI_API_KEY", "")]);
        assert_eq!(OpenAiConfig::from_vars(&vars).unwrap().api_key, None);
        let vars = Vars::from_pairs(&[("OPENAI_API_KEY", "sk-sentinel")]);
        let openai = OpenAiConfig::from_vars(&vars).unwrap();
        assert_eq!(
            openai.api_key.as_ref().map(Secret::expose),
            Some("sk-sentinel")
        );
        assert!(!format!("{openai:?}").contains("sentinel"));
    }

    #[test]
    fn reads_only_its_own_variables() {
        reads_only(OWN, OpenAiConfig::from_vars).unwrap();
    }
}
