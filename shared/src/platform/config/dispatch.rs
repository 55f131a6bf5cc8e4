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
    /// The dispatcher's DynamoDB requests in flight at once: as many as the function's CPU
    /// serves well inside half of `DISPATCH_ATTEMPT_TIMEOUT` (`DISPATCH_STORE_CONCURRENCY`,
    /// default [`store_concurrency_for`] the function's memory), so a request waits for the
    /// process in the queue, not inside its attempt's timeout.
    pub store_concurrency: usize,
    /// Calls one invocation takes on before a minute is split into parts
    /// (`DISPATCH_CALLS_PER_WORKER`).
    pub calls_per_worker: u32,
    /// The most parts a minute is split into (`DISPATCH_MAX_WORKERS`).
    pub max_workers: u32,
    /// How long a push to a device that confirms its calls waits for the confirmation before the
    /// call is pushed again (`CALL_CONFIRM_WAIT_MS`, default 5000).
    pub confirm_wait: Duration,
    /// The most pushes of one call to such a device, the first included (`CALL_MAX_PUSHES`,
    /// default 3).
    pub max_pushes: u32,
    /// Write units per second the calls table serves at once, that its minutes are planned
    /// for: its warm throughput (`DISPATCH_WRITE_BUDGET`, default a new table's 4,000), never
    /// above the account's table-level quota (`DISPATCH_TABLE_WRITE_QUOTA`, default 40,000).
    pub write_budget: u32,
}

pub const DEFAULT_DISPATCH_WINDOW: Duration = Duration::from_secs(70);
pub const DEFAULT_DISPATCH_RESELECT_EVERY: Duration = Duration::from_secs(5);
pub const DEFAULT_DISPATCH_CLAIM_LEAD: Duration = Duration::from_millis(500);
pub const DEFAULT_DISPATCH_PUSH_BUDGET: Duration = Duration::from_secs(1);
/// Write units per second a new on-demand table (and each new index) serves at once (its warm
/// throughput, AWS), and the account's table-level quota by default.
pub const NEW_TABLE_WRITE_UNITS: u64 = 4_000;
pub const DEFAULT_TABLE_WRITE_QUOTA: u64 = 40_000;

/// The dispatcher's DynamoDB requests one vCPU (a Lambda of 1,769 MB) keeps in flight: at the
/// measured ~175 µs of CPU per request (bench/dispatch-requests.sh, docs/reliability.md "Timeouts"),
/// 1,400 queued ones take ~250 ms, half the dispatch attempt timeout.
const STORE_CONCURRENCY_PER_VCPU: u64 = 1_400;
/// A Lambda's memory at which it has one full vCPU (AWS: CPU in proportion to memory).
const MB_PER_VCPU: u64 = 1_769;

/// The store concurrency for a function of `memory_mb` (`AWS_LAMBDA_FUNCTION_MEMORY_SIZE`;
/// `None` outside Lambda: one vCPU's), never below 50: 202 at 256 MB, 1,400 at 1,769 MB.
pub fn store_concurrency_for(memory_mb: Option<u64>) -> usize {
    let per_vcpu = STORE_CONCURRENCY_PER_VCPU;
    let share = memory_mb.map_or(per_vcpu, |mb| per_vcpu * mb.min(MB_PER_VCPU) / MB_PER_VCPU);
    share.max(50) as usize
}

impl DispatchConfig {
    /// `DISPATCH_GRACE_SECS` (default 120), `DISPATCH_CLAIM_TIMEOUT_SECS` (default 30),
    /// `DISPATCH_CONCURRENCY` (default 500) and `DISPATCH_STORE_CONCURRENCY` (default by the
    /// Lambda's `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`), `DISPATCH_WRITE_BUDGET` and
    /// `DISPATCH_TABLE_WRITE_QUOTA`; the rest of the timing is fixed.
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
            store_concurrency: match vars.get("DISPATCH_STORE_CONCURRENCY") {
                Some(_) => vars.int_or("DISPATCH_STORE_CONCURRENCY", 0, 1..=10_000)? as usize,
                None => store_concurrency_for(
                    vars.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
                        .and_then(|mb| mb.trim().parse().ok()),
                ),
            },
            calls_per_worker: vars.int_or("DISPATCH_CALLS_PER_WORKER", 5000, 100..=5000)? as u32,
            max_workers: vars.int_or("DISPATCH_MAX_WORKERS", 32, 1..=256)? as u32,
            confirm_wait: Duration::from_millis(vars.int_or(
                "CALL_CONFIRM_WAIT_MS",
                5000,
                1000..=60_000,
            )?),
            max_pushes: vars.int_or("CALL_MAX_PUSHES", 3, 1..=10)? as u32,
            write_budget: vars
                .int_or(
                    "DISPATCH_WRITE_BUDGET",
                    NEW_TABLE_WRITE_UNITS,
                    3..=10_000_000,
                )?
                .min(vars.int_or(
                    "DISPATCH_TABLE_WRITE_QUOTA",
                    DEFAULT_TABLE_WRITE_QUOTA,
                    1_000..=10_000_000,
                )?) as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::config::testing::{each_names_its_variable, reads_only};

    const OWN: &[&str] = &[
        "DISPATCH_GRACE_SECS",
        "DISPATCH_CLAIM_TIMEOUT_SECS",
        "DISPATCH_CONCURRENCY",
        "DISPATCH_STORE_CONCURRENCY",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
        "DISPATCH_CALLS_PER_WORKER",
        "DISPATCH_MAX_WORKERS",
        "CALL_CONFIRM_WAIT_MS",
        "CALL_MAX_PUSHES",
        "DISPATCH_WRITE_BUDGET",
        "DISPATCH_TABLE_WRITE_QUOTA",
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
        assert_eq!(d.store_concurrency, 1_400, "one vCPU's outside Lambda");
        assert_eq!((d.calls_per_worker, d.max_workers), (5000, 32));
        assert_eq!((d.confirm_wait, d.max_pushes), (Duration::from_secs(5), 3));
        assert_eq!(d.write_budget, 4_000, "a new table's warm throughput");
    }

    #[test]
    fn the_write_budget_is_never_above_the_table_quota() {
        let budget = |pairs: &[(&str, &str)]| {
            DispatchConfig::from_vars(&Vars::from_pairs(pairs))
                .unwrap()
                .write_budget
        };
        assert_eq!(budget(&[("DISPATCH_WRITE_BUDGET", "30")]), 30);
        assert_eq!(budget(&[("DISPATCH_WRITE_BUDGET", "60000")]), 40_000);
        assert_eq!(
            budget(&[
                ("DISPATCH_WRITE_BUDGET", "60000"),
                ("DISPATCH_TABLE_WRITE_QUOTA", "80000")
            ]),
            60_000
        );
    }

    #[test]
    fn bad_values_name_their_variable() {
        each_names_its_variable(
            &[
                ("DISPATCH_GRACE_SECS", "-1"),
                ("DISPATCH_GRACE_SECS", "3601"),
                ("DISPATCH_CLAIM_TIMEOUT_SECS", "4"),
                ("DISPATCH_CONCURRENCY", "0"),
                ("DISPATCH_CONCURRENCY", "5001"),
                ("DISPATCH_STORE_CONCURRENCY", "0"),
                ("DISPATCH_CALLS_PER_WORKER", "99"),
                ("DISPATCH_MAX_WORKERS", "0"),
                ("DISPATCH_MAX_WORKERS", "257"),
                ("CALL_CONFIRM_WAIT_MS", "999"),
                ("CALL_MAX_PUSHES", "0"),
                ("DISPATCH_WRITE_BUDGET", "2"),
                ("DISPATCH_WRITE_BUDGET", "many"),
                ("DISPATCH_TABLE_WRITE_QUOTA", "999"),
            ],
            DispatchConfig::from_vars,
        );
    }

    #[test]
    fn the_store_concurrency_follows_the_lambdas_cpu() {
        let at = |mb: &str| {
            DispatchConfig::from_vars(&Vars::from_pairs(&[(
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
                mb,
            )]))
            .unwrap()
            .store_concurrency
        };
        assert_eq!(at("256"), 202);
        assert_eq!(at("1769"), 1_400);
        assert_eq!(at("3008"), 1_400, "a second vCPU serves other tasks");
        assert_eq!(at("128"), 101);
        assert_eq!(store_concurrency_for(Some(32)), 50);
        let set = Vars::from_pairs(&[
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256"),
            ("DISPATCH_STORE_CONCURRENCY", "64"),
        ]);
        assert_eq!(
            DispatchConfig::from_vars(&set).unwrap().store_concurrency,
            64
        );
    }

    #[test]
    fn reads_only_its_own_variables() {
        reads_only(OWN, DispatchConfig::from_vars).unwrap();
    }
}
