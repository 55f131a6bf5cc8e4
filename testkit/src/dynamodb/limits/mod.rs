//! A model of DynamoDB's per-partition throughput limits: one token bucket per table or GSI and
//! partition key value, pure (no I/O), shared by the proxy in front of DynamoDB Local
//! (`limits_proxy`) and by in-process stores of the large benchmarks.
//!
//! What it models and what it leaves out: docs/benchmarks.md, "The limits models". In short: each partition
//! (of the base table, and separately of each GSI) can take `wcu_per_sec` write units and
//! `rcu_per_sec` read units a second, refilled continuously, with at most `burst_secs` of unused
//! capacity kept (one second by default: no adaptive capacity, no 300 s burst credit). A request
//! pays all its charges or none ([`LimitsModel::charge`]).

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
/// DynamoDB's per-partition limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Write units a second one partition takes (1 WCU = one write of up to 1 KB).
    pub wcu_per_sec: f64,
    /// Read units a second one partition takes (1 RCU = one strongly consistent read of up to
    /// 4 KB, or two eventually consistent ones).
    pub rcu_per_sec: f64,
    /// How many seconds of unused capacity a partition keeps (its bucket's size). A bucket starts
    /// full.
    pub burst_secs: f64,
}

impl Default for Limits {
    /// DynamoDB's published per-partition maximums, and one second of burst.
    fn default() -> Limits {
        Limits {
            wcu_per_sec: 1000.0,
            rcu_per_sec: 3000.0,
            burst_secs: 1.0,
        }
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

/// The partition that could not pay: the request took nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Throttled {
    pub target: Target,
    pub key: String,
    pub capacity: Capacity,
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
        write!(
            f,
            "throttled: {} partition {:?} has no {capacity} capacity left",
            self.target, self.key
        )
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
    /// Throttled requests by the table or index that could not pay.
    pub throttled_by_target: BTreeMap<Target, u64>,
    pub hottest_write: Option<Hottest>,
    pub hottest_read: Option<Hottest>,
}

impl Stats {
    pub fn throttled(&self) -> u64 {
        self.throttled_by_operation.values().sum()
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
        write!(f, "; {} requests throttled", self.throttled())
    }
}

#[cfg(test)]
mod tests;
