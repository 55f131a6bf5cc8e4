//! The info endpoint's section: maintenance mode, minimum app version and message.

use super::{ConfigError, Vars};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoConfig {
    pub maintenance: bool,
    pub minimum_version: String,
    pub message: Option<String>,
}

impl InfoConfig {
    /// `MAINTENANCE_MODE` (default false), `MINIMUM_VERSION` (default 1.0.0), `INFO_MESSAGE`.
    pub fn from_vars(vars: &Vars) -> Result<InfoConfig, ConfigError> {
        let minimum_version = vars.string_or("MINIMUM_VERSION", "1.0.0");
        if !is_version(&minimum_version) {
            return Err(ConfigError {
                var: "MINIMUM_VERSION",
                reason: "must be a version like 1.2.3".into(),
            });
        }
        Ok(InfoConfig {
            maintenance: vars.bool_or("MAINTENANCE_MODE", false)?,
            minimum_version,
            message: vars.get("INFO_MESSAGE"),
        })
    }
}

/// One to three dot-separated numbers of at most 9 digits each.
fn is_version(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    (1..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 9 && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::config::testing::{each_names_its_variable, reads_only};

    const OWN: &[&str] = &["MAINTENANCE_MODE", "MINIMUM_VERSION", "INFO_MESSAGE"];

    #[test]
    fn defaults_need_no_variables() {
        assert_eq!(
            InfoConfig::from_vars(&Vars::from_pairs(&[])).unwrap(),
            InfoConfig {
                maintenance: false,
                minimum_version: "1.0.0".into(),
                message: None
            }
        );
    }

    #[test]
    fn bad_values_name_their_variable() {
        each_names_its_variable(
            &[
                ("MAINTENANCE_MODE", "yes"),
                ("MINIMUM_VERSION", "v1"),
                ("MINIMUM_VERSION", "1.2.3.4"),
                ("MINIMUM_VERSION", "1..2"),
            ],
            InfoConfig::from_vars,
        );
    }

    #[test]
    fn empty_values_count_as_unset() {
        let info = InfoConfig::from_vars(&Vars::from_pairs(&[
            ("INFO_MESSAGE", ""),
            ("MINIMUM_VERSION", " "),
            ("MAINTENANCE_MODE", "true"),
        ]))
        .unwrap();
        assert_eq!(info.message, None);
        assert_eq!(info.minimum_version, "1.0.0");
        assert!(info.maintenance);
    }

    #[test]
    fn reads_only_its_own_variables() {
        reads_only(OWN, InfoConfig::from_vars).unwrap();
    }
}
