//! A minute's calls against the write throughput the calls table serves at once, told when the
//! reservation is made (hours ahead), not when the minute comes: every call of a minute may be
//! due in its same second, and its dispatch writes the table about [`WRITE_UNITS_PER_CALL`]
//! times within that second (docs/scale.md).

use chrono::{DateTime, Utc};

use crate::metrics::catalogue::DISPATCH;
use crate::metrics::{Metrics, Record};
use crate::store::DUE_INDEX;

/// Table write units one call's dispatch takes within its second (claim, push mark, outcome;
/// docs/dynamodb.md); its index takes about 1.
pub const WRITE_UNITS_PER_CALL: u32 = 3;

/// What the create path needs to tell a minute past the table's budget.
pub struct MinuteCapacity {
    /// Write units per second the calls table serves at once (`DISPATCH_WRITE_BUDGET`).
    pub write_budget: u32,
    /// The calls table's name, for the command the notice gives.
    pub calls_table: String,
    /// `MinuteOverCapacity` (`Koe/Dispatch`), dimension `Function` (the create function).
    pub metrics: Metrics,
}

impl MinuteCapacity {
    /// The most calls a minute holds that its budget serves in one second.
    pub fn calls_per_minute(&self) -> u32 {
        self.write_budget / WRITE_UNITS_PER_CALL
    }

    /// Tells, once per minute, that `minute`'s count (`count`, just after a create) went past
    /// the budget: the create whose count is the first over it writes `MinuteOverCapacity` and
    /// a warning with the command that raises the tables' warm throughput; the others nothing.
    pub fn notice(&self, minute: &str, count: u32, now: DateTime<Utc>) {
        if count != self.calls_per_minute() + 1 {
            return;
        }
        self.metrics
            .emit(&over_capacity_record(self.metrics.function(), now));
        let needed = warm_write_units_for(count);
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

/// The record of a minute gone past the budget (`koe::handlers::capacity`).
pub fn over_capacity_record(function: &str, at: DateTime<Utc>) -> Record {
    Record::new(DISPATCH, at)
        .dimension("Function", function)
        .count("MinuteOverCapacity", 1)
}

/// The warm write units a minute of `calls` needs, in thousands, rounded up.
pub fn warm_write_units_for(calls: u32) -> u64 {
    let units = u64::from(calls) * u64::from(WRITE_UNITS_PER_CALL);
    units.div_ceil(1_000) * 1_000
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

    #[test]
    fn the_figure_covers_three_writes_a_call_in_thousands() {
        assert_eq!(warm_write_units_for(1_334), 5_000);
        assert_eq!(warm_write_units_for(2_000), 6_000);
        assert_eq!(
            raise_command("koe-scheduled-calls", 5_000),
            "aws dynamodb update-table --table-name koe-scheduled-calls --warm-throughput \
             WriteUnitsPerSecond=5000 --global-secondary-index-updates \
             '[{\"Update\":{\"IndexName\":\"byDueShard\",\"WarmThroughput\":\
             {\"WriteUnitsPerSecond\":5000}}}]'"
        );
    }
}
