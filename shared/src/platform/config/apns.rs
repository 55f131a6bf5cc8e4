//! The APNs section: token authentication (`APNS_*`, all or none), the key checked by its adapter,
//! `PUSH_SENDER`, the explicit choice of the logging sender where APNs would be expected, and
//! `APNS_MAX_CONNECTIONS`, the size of the push pool, and `APNS_ENDPOINT`, a loopback
//! APNs-compatible server that takes the pushes instead of Apple.

use std::net::SocketAddr;

use super::{ConfigError, Secret, Vars};

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
    /// `APNS_KEY_P8`, `APNS_KEY_ID`, `APNS_TEAM_ID` and `APNS_BUNDLE_ID`: `None` when none is
    /// set; the ids' and bundle id's forms are checked, the key's is not (see [`ApnsConfig`]).
    pub fn from_vars(vars: &Vars) -> Result<Option<ApnsConfig>, ConfigError> {
        let Some([key, key_id, team_id, bundle_id]) = vars.all_or_none([
            "APNS_KEY_P8",
            "APNS_KEY_ID",
            "APNS_TEAM_ID",
            "APNS_BUNDLE_ID",
        ])?
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
        let valid_bundle = !bundle_id.ends_with(".voip")
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

    /// The VoIP push topic: the app's bundle id plus `.voip`.
    pub fn topic(&self) -> String {
        format!("{}.voip", self.bundle_id)
    }
}

/// `APNS_MAX_CONNECTIONS` unless set.
pub const DEFAULT_APNS_MAX_CONNECTIONS: usize = 8;

/// `APNS_MAX_CONNECTIONS`: how many APNs connections the push pool (`koe::push::pool`) may open
/// (each one HTTP/2 connection per environment, about 900 of our pushes in flight at once); 1 to 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApnsPoolConfig {
    pub max_connections: usize,
    /// `APNS_ENDPOINT`: where the pool's connections go instead of Apple, an APNs-compatible
    /// HTTP/2 server (prior knowledge, no TLS) on this machine, for local runs and tests.
    pub endpoint: Option<SocketAddr>,
}

impl ApnsPoolConfig {
    pub fn from_vars(vars: &Vars) -> Result<ApnsPoolConfig, ConfigError> {
        let max_connections = vars.int_or(
            "APNS_MAX_CONNECTIONS",
            DEFAULT_APNS_MAX_CONNECTIONS as u64,
            1..=64,
        )? as usize;
        Ok(ApnsPoolConfig {
            max_connections,
            endpoint: apns_endpoint(vars)?,
        })
    }
}

/// `APNS_ENDPOINT`: `http://<loopback address>:<port>` (`localhost` too). Anything else is
/// refused: pushes carry device tokens and the provider token, and a server elsewhere reached
/// without TLS would see both.
fn apns_endpoint(vars: &Vars) -> Result<Option<SocketAddr>, ConfigError> {
    let Some(value) = vars.get("APNS_ENDPOINT") else {
        return Ok(None);
    };
    let refused = || ConfigError {
        var: "APNS_ENDPOINT",
        reason: "must be http://<loopback address>:<port>, e.g. http://127.0.0.1:8443 (an \
                 APNs-compatible HTTP/2 server on this machine)"
            .into(),
    };
    let value = value.trim();
    let authority = value.strip_prefix("http://").ok_or_else(refused)?;
    let authority = authority.strip_suffix('/').unwrap_or(authority);
    let addr = match authority.strip_prefix("localhost:") {
        Some(port) => SocketAddr::from(([127, 0, 0, 1], port.parse().map_err(|_| refused())?)),
        None => authority.parse::<SocketAddr>().map_err(|_| refused())?,
    };
    if !addr.ip().is_loopback() || addr.port() == 0 {
        return Err(refused());
    }
    Ok(Some(addr))
}

/// `PUSH_SENDER`: which push sender a Lambda dispatcher may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushSenderChoice {
    /// `apns` (or unset): APNs, and a Lambda dispatcher without `APNS_*` refuses to start.
    Apns,
    /// `auto` (the stack's default): APNs once its key is set, the logging sender (with a
    /// warning each run) until then, so a new stack runs safely before its APNs key is stored.
    Auto,
    /// `log`: the logging sender, even where `APNS_*` is set (nothing rings; for stacks and
    /// local runs without an APNs key).
    Log,
}

impl PushSenderChoice {
    pub fn from_vars(vars: &Vars) -> Result<PushSenderChoice, ConfigError> {
        match vars.get("PUSH_SENDER").as_deref().map(str::trim) {
            None | Some("apns") => Ok(PushSenderChoice::Apns),
            Some("auto") => Ok(PushSenderChoice::Auto),
            Some("log") => Ok(PushSenderChoice::Log),
            Some(_) => Err(ConfigError {
                var: "PUSH_SENDER",
                reason: "must be `auto`, `apns` or `log`".into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::config::testing::reads_only;

    #[test]
    fn the_push_sender_choice_is_apns_unless_log_is_asked_for() {
        let choice =
            |v: &str| PushSenderChoice::from_vars(&Vars::from_pairs(&[("PUSH_SENDER", v)]));
        assert_eq!(choice("").unwrap(), PushSenderChoice::Apns);
        assert_eq!(choice("apns").unwrap(), PushSenderChoice::Apns);
        assert_eq!(choice("log").unwrap(), PushSenderChoice::Log);
        assert_eq!(choice("logging").unwrap_err().var, "PUSH_SENDER");
    }

    #[test]
    fn the_pool_size_is_8_unless_set_from_1_to_64() {
        let size = |v: &str| {
            ApnsPoolConfig::from_vars(&Vars::from_pairs(&[("APNS_MAX_CONNECTIONS", v)]))
                .map(|c| c.max_connections)
        };
        assert_eq!(size("").unwrap(), 8);
        assert_eq!(size("1").unwrap(), 1);
        assert_eq!(size(" 16 ").unwrap(), 16);
        assert_eq!(size("64").unwrap(), 64);
        for bad in ["0", "65", "-1", "eight", "8.5"] {
            let err = size(bad).unwrap_err();
            assert_eq!(err.var, "APNS_MAX_CONNECTIONS", "{bad}");
            assert!(err.reason.contains("1 to 64"), "{bad}: {}", err.reason);
        }
        reads_only(
            &["APNS_MAX_CONNECTIONS", "APNS_ENDPOINT"],
            ApnsPoolConfig::from_vars,
        )
        .unwrap();
    }

    #[test]
    fn the_apns_endpoint_is_a_loopback_http_address_or_nothing() {
        let endpoint = |v: &str| {
            ApnsPoolConfig::from_vars(&Vars::from_pairs(&[("APNS_ENDPOINT", v)]))
                .map(|c| c.endpoint.map(|a| a.to_string()))
        };
        assert_eq!(endpoint("").unwrap(), None);
        for (given, addr) in [
            ("http://127.0.0.1:8443", "127.0.0.1:8443"),
            (" http://127.0.0.1:8443/ ", "127.0.0.1:8443"),
            ("http://localhost:9000", "127.0.0.1:9000"),
            ("http://[::1]:8443", "[::1]:8443"),
        ] {
            assert_eq!(endpoint(given).unwrap().as_deref(), Some(addr), "{given}");
        }
        for bad in [
            "http://10.0.0.5:8443",
            "http://api.push.apple.com:443",
            "https://127.0.0.1:8443",
            "127.0.0.1:8443",
            "http://127.0.0.1",
            "http://127.0.0.1:0",
            "http://0.0.0.0:8443",
        ] {
            let err = endpoint(bad).unwrap_err();
            assert_eq!(err.var, "APNS_ENDPOINT", "{bad}");
        }
    }

    const OWN: &[&str] = &[
        "APNS_KEY_P8",
        "APNS_KEY_ID",
        "APNS_TEAM_ID",
        "APNS_BUNDLE_ID",
    ];

    const TEST_P8: &str = include_str!("../../../../testkit/keys/apns-test.p8");

    fn apns_vars(key: &str) -> Vec<(&'static str, String)> {
        vec![
            ("APNS_KEY_P8", key.to_owned()),
            ("APNS_KEY_ID", "ABCDE12345".to_owned()),
            ("APNS_TEAM_ID", "TEAM123456".to_owned()),
            ("APNS_BUNDLE_ID", "com.example.koe".to_owned()),
        ]
    }

    fn from(pairs: &[(&'static str, String)]) -> Result<Option<ApnsConfig>, ConfigError> {
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        ApnsConfig::from_vars(&Vars::from_pairs(&pairs))
    }

    #[test]
    fn apns_is_all_or_none_with_apple_ids_and_a_bundle_id() {
        assert_eq!(from(&[]).unwrap(), None);
        let apns = from(&apns_vars(TEST_P8)).unwrap().expect("APNs configured");
        assert_eq!(apns.topic(), "com.example.koe.voip");
        assert_eq!(apns.key_p8.expose(), TEST_P8.trim());
        assert!(
            !format!("{apns:?}").contains("BEGIN"),
            "the key never prints"
        );

        for missing in OWN {
            let partial: Vec<_> = apns_vars(TEST_P8)
                .into_iter()
                .filter(|(k, _)| k != missing)
                .collect();
            assert_eq!(from(&partial).unwrap_err().var, *missing);
        }
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
    fn the_key_is_carried_not_parsed() {
        // Its adapter parses it (push::apns); here any value passes.
        let apns = from(&apns_vars("AAAA")).unwrap().expect("APNs configured");
        assert_eq!(apns.key_p8.expose(), "AAAA");
    }

    #[test]
    fn reads_only_its_own_variables() {
        assert_eq!(reads_only(OWN, ApnsConfig::from_vars).unwrap(), None);
    }
}
