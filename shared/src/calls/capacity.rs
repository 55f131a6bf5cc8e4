//! A minute's calls against the write throughput the calls table serves at once, told when the
//! reservation is made (hours ahead), not when the minute comes: every call of a minute may be
//! due in its same second, and the dispatcher's plan fits only so many calls' writes around it
//! ([`calls_on_time`]; docs/dispatch.md, "Writes spent as a budget").

use chrono::{DateTime, Utc};

use crate::dispatch::calls_on_time;
use crate::domain::due::COUNT_STEP;
use crate::platform::metrics::catalogue::DISPATCH;
use crate::platform::metrics::{Metrics, Record};
use crate::store::DUE_INDEX;

/// What the create path needs to tell a minute past the table's budget.
pub struct MinuteCapacity {
    /// Write units per second the calls table serves at once (`DISPATCH_WRITE_BUDGET`).
    pub write_budget: u32,
    /// When the dispatcher gives up a claim without outcome (`DISPATCH_CLAIM_TIMEOUT_SECS`):
    /// it bounds how far ahead a crowded second's claims can be spread.
    pub claim_timeout: std::time::Duration,
    /// The calls table's name, for the command the notice gives.
    pub calls_table: String,
    /// `MinuteOverCapacity` (`Koe/Dispatch`), dimension `Function` (the create function).
    pub metrics: Metrics,
}

impl MinuteCapacity {
    /// The most calls a minute holds that its budget rings on time, all in one second.
    pub fn calls_per_minute(&self) -> u32 {
        calls_on_time(self.write_budget, self.claim_timeout)
    }

    /// Tells, once per minute, that `minute`'s count (`count`, just after a create raised it by
    /// [`COUNT_STEP`]: `Created::New`'s `minute_count`) went past the budget: the create whose
    /// raise crossed it (the count before it, `count - COUNT_STEP`, within the budget; the count
    /// now past it) writes `MinuteOverCapacity` and a warning with the command that raises the
    /// tables' warm throughput; the others nothing. The count is an estimate (one create in
    /// `COUNT_STEP` raises it), so the notice comes within about `COUNT_STEP` creates of the
    /// minute's real crossing.
    pub fn notice(&self, minute: &str, count: u32, now: DateTime<Utc>) {
        let budget = self.calls_per_minute();
        if !crossed(count.saturating_sub(COUNT_STEP), budget, count) {
            return;
        }
        self.metrics
            .emit(&over_capacity_record(self.metrics.function(), now));
        let needed = warm_write_units_for(count, self.claim_timeout);
        tracing::warn!(
            minute,
            calls = count,
            write_budget = self.write_budget,
            needed_write_units = needed,
            command = raise_command(&self.calls_table, needed),
            "a minute's calls are past the write throughput the calls table serves at once: \
             raise its warm throughput before the minute (docs/operations.md, \
             \"dispatch-minute-over-capacity\")"
        );
    }
}

/// Whether a count that went from `previous` to `now` went past `budget` calls with it.
fn crossed(previous: u32, budget: u32, now: u32) -> bool {
    previous <= budget && budget < now
}

/// The record of a minute gone past the budget (`koe::calls::capacity`).
pub fn over_capacity_record(function: &str, at: DateTime<Utc>) -> Record {
    Record::new(DISPATCH, at)
        .dimension("Function", function)
        .count("MinuteOverCapacity", 1)
}

/// The warm write units a minute of `calls` needs (the least budget whose [`calls_on_time`]
/// holds them, with claims abandoned after `claim_timeout`), in thousands, rounded up.
pub fn warm_write_units_for(calls: u32, claim_timeout: std::time::Duration) -> u64 {
    let per_thousand = u64::from(calls_on_time(1_000, claim_timeout)).max(1);
    u64::from(calls).div_ceil(per_thousand) * 1_000
}

/// The command that raises the warm write throughput of `table` and its due index to `units`.
pub fn raise_command(table: &str, units: u64) -> String {
    format!(
        "aws dynamodb update-table --table-name {table} --warm-throughput \
         WriteUnitsPerSecond={units} --global-secondary-index-updates \
         '[{{\"Update\":{{\"IndexName\":\"{DUE_INDEX}\",\"WarmThroughput\":\
         {{\"WriteUnitsPerSecond\":{units}}}}}}}]'"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past the budget means over it: the raise that takes the count from within it to over
    /// it, whatever the step, and no other.
    #[test]
    fn a_count_crosses_the_budget_once() {
        assert!(crossed(10, 10, 11));
        assert!(crossed(1, 10, 33));
        assert!(crossed(10, 10, 42));
        assert!(!crossed(1, 40, 33));
        assert!(!crossed(33, 10, 65));
        assert!(!crossed(11, 10, 43));
        assert!(!crossed(0, 0, 0));
    }

    #[test]
    fn the_figure_is_the_budget_that_rings_the_minute_on_time_in_thousands() {
        // 1,000 units ring 3,000 calls of one second on time (`calls_on_time`), with the
        // default claim timeout; 1,875 with claims abandoned after 10 s (their lead binds).
        let default = std::time::Duration::from_secs(30);
        assert_eq!(warm_write_units_for(12_001, default), 5_000);
        assert_eq!(warm_write_units_for(15_000, default), 5_000);
        assert_eq!(warm_write_units_for(100_000, default), 34_000);
        let short = std::time::Duration::from_secs(10);
        assert_eq!(warm_write_units_for(12_001, short), 7_000);
        for timeout in [default, short] {
            for calls in [12_001, 15_001, 100_000] {
                let units = warm_write_units_for(calls, timeout) as u32;
                let on_time = |units| calls_on_time(units, timeout);
                assert!(on_time(units) >= calls && on_time(units - 1_000) < calls);
            }
        }
        assert_eq!(
            raise_command("koe-scheduled-calls", 5_000),
            "aws dynamodb update-table --table-name koe-scheduled-calls --warm-throughput \
             WriteUnitsPerSecond=5000 --global-secondary-index-updates \
             '[{\"Update\":{\"IndexName\":\"byDueShard\",\"WarmThroughput\":\
             {\"WriteUnitsPerSecond\":5000}}}]'"
        );
    }
}
