//! The dispatcher's section: grace, claim timeout, concurrency and the split of big minutes
//! (`DISPATCH_*`), and its timing.

use std::time::Duration;

use super::{ConfigError, Vars};

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
    /// Calls one invocation takes on before a minute is split into parts
    /// (`DISPATCH_CALLS_PER_WORKER`).
    pub calls_per_worker: u32,
    /// The most parts a minute is split into (`DISPATCH_MAX_WORKERS`).
    pub max_workers: u32,
}

pub const DEFAULT_DISPATCH_WINDOW: Duration = Duration::from_secs(70);
pub const DEFAULT_DISPATCH_RESELECT_EVERY: Duration = Duration::from_secs(5);
pub const DEFAULT_DISPATCH_CLAIM_LEAD: Duration = Duration::from_millis(500);
pub const DEFAULT_DISPATCH_PUSH_BUDGET: Duration = Duration::from_secs(1);

impl DispatchConfig {
    /// `DISPATCH_GRACE_SECS` (default 120), `DISPATCH_CLAIM_TIMEOUT_SECS` (default 30) and
    /// `DISPATCH_CONCURRENCY` (default 500); the rest of the timing is fixed.
    pub fn from_vars(vars: &Vars) -> Result<DispatchConfig, ConfigError> {
        Ok(DispatchConfig {
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
            calls_per_worker: vars.int_or("DISPATCH_CALLS_PER_WORKER", 5000, 100..=5000)? as u32,
            max_workers: vars.int_or("DISPATCH_MAX_WORKERS", 32, 1..=256)? as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::{broken_except, names, variables_read};

    const OWN: &[&str] = &[
        "DISPATCH_GRACE_SECS",
        "DISPATCH_CLAIM_TIMEOUT_SECS",
        "DISPATCH_CONCURRENCY",
        "DISPATCH_CALLS_PER_WORKER",
        "DISPATCH_MAX_WORKERS",
    ];

    #[test]
    fn dispatch_defaults_are_the_production_timing() {
        let d = DispatchConfig::from_vars(&Vars::from_pairs(&[])).unwrap();
        assert_eq!(d.grace, Duration::from_secs(120));
        assert_eq!(d.claim_timeout, Duration::from_secs(30));
        assert_eq!(d.window, Duration::from_secs(70));
        assert_eq!(d.reselect_every, Duration::from_secs(5));
        assert!(d.claim_lead <= Duration::from_secs(1));
        assert_eq!(d.push_budget, Duration::from_secs(1));
        assert_eq!(d.concurrency, 500);
        assert_eq!((d.calls_per_worker, d.max_workers), (5000, 32));
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (var, value) in [
            ("DISPATCH_GRACE_SECS", "-1"),
            ("DISPATCH_GRACE_SECS", "3601"),
            ("DISPATCH_CLAIM_TIMEOUT_SECS", "4"),
            ("DISPATCH_CONCURRENCY", "0"),
            ("DISPATCH_CONCURRENCY", "5001"),
            ("DISPATCH_CALLS_PER_WORKER", "99"),
            ("DISPATCH_MAX_WORKERS", "0"),
            ("DISPATCH_MAX_WORKERS", "257"),
        ] {
            let err = DispatchConfig::from_vars(&Vars::from_pairs(&[(var, value)])).unwrap_err();
            assert_eq!(err.var, var, "{var}={value}");
        }
    }

    #[test]
    fn reads_only_its_own_variables() {
        assert_eq!(
            variables_read(|vars| drop(DispatchConfig::from_vars(vars))),
            names(OWN)
        );
        DispatchConfig::from_vars(&broken_except(OWN)).unwrap();
    }
}
