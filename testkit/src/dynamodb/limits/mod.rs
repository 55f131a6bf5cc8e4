//! A model of DynamoDB's throughput limits: one token bucket per table or GSI and partition key
//! value, and one per table or GSI as a whole, pure (no I/O), shared by the proxy in front of
//! DynamoDB Local (`limits_proxy`) and by in-process stores of the large benchmarks.
//!
//! What it models and what it leaves out: docs/benchmarks.md, "The limits models". In short: each partition
//! (of the base table, and separately of each GSI) can take `wcu_per_sec` write units and
//! `rcu_per_sec` read units a second, refilled continuously, with at most `burst_secs` of unused
//! capacity kept (one second by default: no adaptive capacity, no 300 s burst credit). Each table,
//! and each GSI apart, can take its warm throughput (a new on-demand table's 4,000 WRU/s and
//! 12,000 RRU/s), never more than the account's per-table quota (40,000 each), in a bucket of
//! the same kind. A request pays all its charges or none ([`LimitsModel::charge`]).

pub mod cost;
mod model;
pub mod update;

use std::collections::BTreeMap;
use std::fmt;

pub use self::cost::{
    GsiDef, Item, Projection, TableDef, item_size, read_charge, read_units, unevaluated_charges,
    write_charges, write_units,
};

pub use self::model::LimitsModel;

/// DynamoDB's per-partition and table-level limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Write units a second one partition takes (1 WCU = one write of up to 1 KB).
    pub wcu_per_sec: f64,
    /// Read units a second one partition takes (1 RCU = one strongly consistent read of up to
    /// 4 KB, or two eventually consistent ones).
    pub rcu_per_sec: f64,
    /// How many seconds of unused capacity a partition, or a table, keeps (its bucket's size). A
    /// bucket starts full.
    pub burst_secs: f64,
    /// Write units a second each table, and each GSI apart, takes: its warm throughput (what a
    /// template's `WarmThroughput` sets; a new on-demand table's 4,000).
    pub table_write_units: f64,
    /// Read units a second each table, and each GSI apart, takes (a new table's 12,000).
    pub table_read_units: f64,
    /// The account's per-table quota of write units a second (40,000), over any warm throughput.
    pub quota_write_units: f64,
    /// The account's per-table quota of read units a second (40,000).
    pub quota_read_units: f64,
}

impl Default for Limits {
    /// DynamoDB's published per-partition maximums, one second of burst, a new on-demand
    /// table's warm throughput and the default per-table quotas.
    fn default() -> Limits {
        Limits {
            wcu_per_sec: 1000.0,
            rcu_per_sec: 3000.0,
            burst_secs: 1.0,
            table_write_units: 4000.0,
            table_read_units: 12_000.0,
            quota_write_units: 40_000.0,
            quota_read_units: 40_000.0,
        }
    }
}

impl Limits {
    /// The defaults, with what the environment sets (for the benchmarks):
    /// `KOE_LIMITS_WARM=WRU,RRU` (each table's and GSI's warm throughput),
    /// `KOE_LIMITS_QUOTA=WRU,RRU` (the per-table quota) and `KOE_LIMITS_SCALE=F` (every figure,
    /// partition and table, times F). Panics on a malformed value.
    pub fn from_env() -> Limits {
        let pair = |name: &str| -> Option<(f64, f64)> {
            let value = std::env::var(name).ok()?;
            let parsed = value
                .split_once(',')
                .and_then(|(w, r)| Some((w.trim().parse().ok()?, r.trim().parse().ok()?)));
            Some(parsed.unwrap_or_else(|| panic!("{name}={value}: expected WRU,RRU")))
        };
        let mut limits = Limits::default();
        if let Some((w, r)) = pair("KOE_LIMITS_WARM") {
            (limits.table_write_units, limits.table_read_units) = (w, r);
        }
        if let Some((w, r)) = pair("KOE_LIMITS_QUOTA") {
            (limits.quota_write_units, limits.quota_read_units) = (w, r);
        }
        match std::env::var("KOE_LIMITS_SCALE") {
            Ok(f) => limits.scaled(
                f.parse()
                    .unwrap_or_else(|_| panic!("KOE_LIMITS_SCALE={f}: expected a number")),
            ),
            Err(_) => limits,
        }
    }

    /// Every rate, partition and table-level, times `factor` (e.g. 1/20 to measure at a
    /// twentieth of DynamoDB's figures); the burst stays.
    pub fn scaled(self, factor: f64) -> Limits {
        Limits {
            wcu_per_sec: self.wcu_per_sec * factor,
            rcu_per_sec: self.rcu_per_sec * factor,
            burst_secs: self.burst_secs,
            table_write_units: self.table_write_units * factor,
            table_read_units: self.table_read_units * factor,
            quota_write_units: self.quota_write_units * factor,
            quota_read_units: self.quota_read_units * factor,
        }
    }

    /// The table-level figures divided by `processes`: one process's share when several, each
    /// with its own model, send to the same tables (the benchmark's parts).
    pub fn table_share(self, processes: u32) -> Limits {
        let n = f64::from(processes.max(1));
        Limits {
            table_write_units: self.table_write_units / n,
            table_read_units: self.table_read_units / n,
            quota_write_units: self.quota_write_units / n,
            quota_read_units: self.quota_read_units / n,
            ..self
        }
    }

    /// Units a second a table or GSI takes: its warm throughput, capped by the quota; and
    /// whether the quota is what binds.
    pub fn table_rate(&self, capacity: Capacity) -> (f64, bool) {
        let (warm, quota) = match capacity {
            Capacity::Write => (self.table_write_units, self.quota_write_units),
            Capacity::Read => (self.table_read_units, self.quota_read_units),
        };
        (warm.min(quota), quota < warm)
    }
}

/// Which of a partition's two capacities a charge draws on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capacity {
    Write,
    Read,
}

/// A table's base partitions (`index: None`) or one of its GSIs'.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    pub table: String,
    pub index: Option<String>,
}

impl Target {
    pub fn base(table: &str) -> Target {
        Target {
            table: table.to_owned(),
            index: None,
        }
    }

    pub fn index(table: &str, index: &str) -> Target {
        Target {
            table: table.to_owned(),
            index: Some(index.to_owned()),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.index {
            Some(index) => write!(f, "{}/{index}", self.table),
            None => f.write_str(&self.table),
        }
    }
}

/// Units one request takes from one partition: `key` is the partition key's value as text
/// (the string, the number's digits, the binary's base64).
#[derive(Debug, Clone, PartialEq)]
pub struct Charge {
    pub target: Target,
    pub key: String,
    pub capacity: Capacity,
    pub units: f64,
}

/// Which limit throttled a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// One partition's (`Throttled::key`).
    Partition,
    /// The table's or GSI's warm throughput, as a whole.
    Table,
    /// The account's per-table quota (lower than the warm throughput configured).
    Quota,
}

/// The partition, or table or GSI as a whole, that could not pay: the request took nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Throttled {
    pub target: Target,
    /// The partition's key (`Level::Partition`), else empty.
    pub key: String,
    pub capacity: Capacity,
    pub level: Level,
}

impl Throttled {
    /// DynamoDB's message for a throttled request (the GSI one when a GSI could not take it).
    pub fn message(&self) -> &'static str {
        match self.target.index {
            Some(_) => {
                "Throughput exceeds the current capacity for one or more global secondary \
                 indexes. DynamoDB is automatically scaling your index so please be patient."
            }
            None => {
                "Throughput exceeds the current capacity of your table or index. DynamoDB is \
                 automatically scaling your table or index so please try again shortly. If \
                 exceptions persist, check if you have a hot key: \
                 https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html"
            }
        }
    }
}

impl fmt::Display for Throttled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let capacity = match self.capacity {
            Capacity::Write => "write",
            Capacity::Read => "read",
        };
        match self.level {
            Level::Partition => write!(
                f,
                "throttled: {} partition {:?} has no {capacity} capacity left",
                self.target, self.key
            ),
            Level::Table => write!(
                f,
                "throttled: {} has no {capacity} capacity left (its warm throughput)",
                self.target
            ),
            Level::Quota => write!(
                f,
                "throttled: {} has no {capacity} capacity left (the per-table quota)",
                self.target
            ),
        }
    }
}

impl std::error::Error for Throttled {}

/// Units consumed on one table or index.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Consumed {
    pub wcu: f64,
    pub rcu: f64,
}

/// The partition that consumed the most units within one whole second (seconds counted from
/// the model's start).
#[derive(Debug, Clone, PartialEq)]
pub struct Hottest {
    pub target: Target,
    pub key: String,
    pub units_per_sec: f64,
}

/// What the model has seen so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub consumed: BTreeMap<Target, Consumed>,
    /// Throttled requests by operation (`PutItem`, `Query`, ...).
    pub throttled_by_operation: BTreeMap<String, u64>,
    /// Throttled requests by the table or index that could not pay (either level).
    pub throttled_by_target: BTreeMap<Target, u64>,
    /// Of those, the ones throttled at the table level (warm throughput or quota), not by a
    /// partition.
    pub throttled_table_by_target: BTreeMap<Target, u64>,
    pub hottest_write: Option<Hottest>,
    pub hottest_read: Option<Hottest>,
    /// Units charged to each table and GSI in each whole second since the model's start (its
    /// request rate, second by second; refunds are not taken off).
    pub by_second: BTreeMap<u64, BTreeMap<Target, Consumed>>,
}

impl Stats {
    pub fn throttled(&self) -> u64 {
        self.throttled_by_operation.values().sum()
    }

    /// Requests throttled by a table's or GSI's own limit.
    pub fn throttled_table(&self) -> u64 {
        self.throttled_table_by_target.values().sum()
    }

    /// Requests throttled by a partition's limit.
    pub fn throttled_partition(&self) -> u64 {
        self.throttled() - self.throttled_table()
    }

    /// The most units `target` was charged in one whole second: writes and reads, each its own
    /// busiest second.
    pub fn peak(&self, target: &Target) -> Consumed {
        let mut peak = Consumed::default();
        for c in self.by_second.values().filter_map(|s| s.get(target)) {
            peak.wcu = peak.wcu.max(c.wcu);
            peak.rcu = peak.rcu.max(c.rcu);
        }
        peak
    }
}

impl fmt::Display for Stats {
    /// One line a benchmark can print: the hottest partitions and the throttled requests.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hottest = |f: &mut fmt::Formatter<'_>, h: &Hottest, unit: &str| {
            write!(
                f,
                "{:.0} {unit}/s on {} partition {:?}",
                h.units_per_sec, h.target, h.key
            )
        };
        f.write_str("hottest partition: ")?;
        match &self.hottest_write {
            Some(h) => hottest(f, h, "WCU")?,
            None => f.write_str("no writes")?,
        }
        if let Some(h) = &self.hottest_read {
            f.write_str(", ")?;
            hottest(f, h, "RCU")?;
        }
        write!(f, "; {} requests throttled", self.throttled())?;
        match self.throttled_table() {
            0 => Ok(()),
            table => write!(f, " ({table} at table level)"),
        }
    }
}

#[cfg(test)]
mod tests;
