//! The logging section: which log lines are written (`RUST_LOG`), and whether metrics are
//! (`METRICS`).

use super::Vars;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// `RUST_LOG` as given: `target=level` directives ("info", "info,koe=debug"). Logging
    /// parses it and falls back to info when it cannot (a log filter never stops a start-up).
    pub directives: Option<String>,
    /// `METRICS`: `emf` (the default) writes metrics as EMF lines to stdout, `off` writes none
    /// (any other value counts as `emf`: metrics never stop a start-up).
    pub metrics: bool,
}

impl Default for LogConfig {
    fn default() -> LogConfig {
        LogConfig {
            directives: None,
            metrics: true,
        }
    }
}

impl LogConfig {
    /// `RUST_LOG` and `METRICS`. Neither can fail.
    pub fn from_vars(vars: &Vars) -> LogConfig {
        LogConfig {
            directives: vars.get("RUST_LOG"),
            metrics: vars
                .get("METRICS")
                .is_none_or(|v| !v.trim().eq_ignore_ascii_case("off")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::config::testing::reads_only;

    #[test]
    fn the_directives_are_read_as_given() {
        let vars = Vars::from_pairs(&[("RUST_LOG", "info,koe=debug")]);
        assert_eq!(
            LogConfig::from_vars(&vars).directives.as_deref(),
            Some("info,koe=debug")
        );
        let blank = Vars::from_pairs(&[("RUST_LOG", " ")]);
        assert_eq!(LogConfig::from_vars(&blank), LogConfig::default());
        for (value, on) in [("off", false), ("OFF", false), ("emf", true), ("x", true)] {
            let vars = Vars::from_pairs(&[("METRICS", value)]);
            assert_eq!(LogConfig::from_vars(&vars).metrics, on, "METRICS={value}");
        }
        assert!(LogConfig::default().metrics);
    }

    #[test]
    fn reads_only_its_own_variables() {
        assert_eq!(
            reads_only(&["RUST_LOG", "METRICS"], LogConfig::from_vars),
            LogConfig::default()
        );
    }
}
