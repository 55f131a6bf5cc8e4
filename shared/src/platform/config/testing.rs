//! Helpers of the sections' tests: which variables a section reads, and the others broken.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use super::{ConfigError, Vars};

/// A value no section accepts for each variable that can be wrong (one of a group that is
/// all or none counts as wrong alone).
const BROKEN: &[(&str, &str)] = &[
    ("OPENAI_BASE_URL", "not a url"),
    ("PROVIDER_TIMEOUT_MS", "soon"),
    ("MAINTENANCE_MODE", "yes"),
    ("MINIMUM_VERSION", "v1"),
    ("STORE", "postgres"),
    ("AGENT_DAILY_LIMIT", "0"),
    ("AGENT_REQUIRE_DEVICE_SECRET", "yes"),
    ("AGENT_PLANNER_MODEL", "gpt 4o"),
    ("AGENT_RESPONDER_MODEL", "gpt-4o?x=1"),
    ("AGENT_STEP_KEY", "short"),
    ("CHAT_DAILY_TOKEN_CEILING", "0"),
    ("AGENT_DAILY_TOKEN_CEILING", "0"),
    ("DISPATCH_GRACE_SECS", "-1"),
    ("DISPATCH_CLAIM_TIMEOUT_SECS", "1"),
    ("DISPATCH_CONCURRENCY", "0"),
    ("APNS_KEY_P8", "not a key!"),
    ("APNS_KEY_ID", "short"),
    ("DISPATCH_OIDC_JWKS_URL", "not a url"),
];

/// Every other section's variables set to broken values; `own` left unset.
pub fn broken_except(own: &[&str]) -> Vars {
    let pairs: Vec<(&str, &str)> = BROKEN
        .iter()
        .copied()
        .filter(|(var, _)| !own.contains(var))
        .collect();
    Vars::from_pairs(&pairs)
}

/// The names `read` looks up (every variable unset).
pub fn variables_read(read: impl FnOnce(&Vars)) -> BTreeSet<String> {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let recorder = seen.clone();
    let vars = Vars::from_fn(move |name| {
        recorder.lock().unwrap().insert(name.to_owned());
        None
    });
    read(&vars);
    seen.lock().unwrap().clone()
}

pub fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// Asserts that `read` looks up exactly the variables `own`, and returns what it reads when
/// every other section's variables are broken (so a caller can show they change nothing).
pub fn reads_only<T>(own: &[&str], read: impl Fn(&Vars) -> T) -> T {
    assert_eq!(variables_read(|vars| drop(read(vars))), names(own));
    read(&broken_except(own))
}

/// Asserts that each `(variable, value)` alone makes `read` fail naming that variable (in its
/// field and in its message).
pub fn each_names_its_variable<T: std::fmt::Debug>(
    cases: &[(&str, &str)],
    read: impl Fn(&Vars) -> Result<T, ConfigError>,
) {
    for &(var, value) in cases {
        let err = read(&Vars::from_pairs(&[(var, value)])).unwrap_err();
        assert_eq!(err.var, var, "{var}={value}");
        assert!(err.to_string().contains(var), "{var}={value}: {err}");
    }
}
