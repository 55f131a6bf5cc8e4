//! The logging section: which log lines are written (`RUST_LOG`).

use super::Vars;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogConfig {
    /// `RUST_LOG` as given: `target=level` directives ("info", "info,koe=debug"). Logging
    /// parses it and falls back to info when it cannot (a log filter never stops a start-up).
    pub directives: Option<String>,
}

impl LogConfig {
    /// `RUST_LOG`. Checked where logging is set up, so this cannot fail.
    pub fn from_vars(vars: &Vars) -> LogConfig {
        LogConfig {
            directives: vars.get("RUST_LOG"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::{broken_except, names, variables_read};

    #[test]
    fn the_directives_are_read_as_given() {
        let vars = Vars::from_pairs(&[("RUST_LOG", "info,koe=debug")]);
        assert_eq!(
            LogConfig::from_vars(&vars).directives.as_deref(),
            Some("info,koe=debug")
        );
        let blank = Vars::from_pairs(&[("RUST_LOG", " ")]);
        assert_eq!(LogConfig::from_vars(&blank), LogConfig::default());
    }

    #[test]
    fn reads_only_its_own_variables() {
        assert_eq!(
            variables_read(|vars| drop(LogConfig::from_vars(vars))),
            names(&["RUST_LOG"])
        );
        assert_eq!(
            LogConfig::from_vars(&broken_except(&["RUST_LOG"])),
            LogConfig::default()
        );
    }
}
