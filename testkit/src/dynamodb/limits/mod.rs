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
pub mod update;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use self::cost::{
    GsiDef, Item, Projection, TableDef, item_size, read_charge, read_units, unevaluated_charges,
    write_charges, write_units,
};

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

type BucketId = (Target, String, Capacity);

struct Bucket {
    tokens: f64,
    at: Instant,
    /// The whole second (since the model's start) `window_units` were consumed in.
    window: u64,
    window_units: f64,
}

struct State {
    buckets: HashMap<BucketId, Bucket>,
    stats: Stats,
}

/// The buckets of every partition seen so far, and the stats. Cheap to share (`Arc`).
pub struct LimitsModel {
    limits: Limits,
    origin: Instant,
    /// Set for a clock that moves only when told ([`LimitsModel::advance`]).
    frozen: Option<Mutex<Instant>>,
    state: Mutex<State>,
}

impl LimitsModel {
    /// A model on the real clock.
    pub fn new(limits: Limits) -> LimitsModel {
        Self::build(limits, false)
    }

    /// A model whose clock stands still until [`LimitsModel::advance`]: for tests that must not
    /// depend on how fast the machine sends their requests.
    pub fn with_frozen_clock(limits: Limits) -> LimitsModel {
        Self::build(limits, true)
    }

    fn build(limits: Limits, frozen: bool) -> LimitsModel {
        let origin = Instant::now();
        LimitsModel {
            limits,
            origin,
            frozen: frozen.then(|| Mutex::new(origin)),
            state: Mutex::new(State {
                buckets: HashMap::new(),
                stats: Stats::default(),
            }),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The model's time: the real clock's, or the frozen one's.
    pub fn now(&self) -> Instant {
        match &self.frozen {
            Some(now) => *now.lock().unwrap(),
            None => Instant::now(),
        }
    }

    /// Moves a frozen clock forward; panics on the real clock.
    pub fn advance(&self, by: Duration) {
        let frozen = self
            .frozen
            .as_ref()
            .expect("advance: the model's clock is not frozen");
        *frozen.lock().unwrap() += by;
    }

    /// Takes every charge of one request of `operation`, or none: if any partition cannot pay
    /// its (summed) units, nothing is taken, the throttle is counted and that partition named.
    pub fn charge(&self, operation: &str, charges: &[Charge]) -> Result<(), Throttled> {
        self.charge_at(operation, charges, self.now())
    }

    pub fn charge_at(
        &self,
        operation: &str,
        charges: &[Charge],
        now: Instant,
    ) -> Result<(), Throttled> {
        let ids: Vec<BucketId> = charges.iter().map(bucket_id).collect();
        // Summed per bucket (a request charging one partition twice), in the charges' order.
        let mut wanted: Vec<(&BucketId, f64)> = Vec::with_capacity(ids.len());
        for (id, c) in ids.iter().zip(charges) {
            match wanted.iter_mut().find(|(w, _)| *w == id) {
                Some((_, units)) => *units += c.units,
                None => wanted.push((id, c.units)),
            }
        }
        let mut state = self.state.lock().unwrap();
        for (id, units) in &wanted {
            let tokens = self.refilled(&mut state, id, now);
            if tokens < *units {
                let (target, key, capacity) = (*id).clone();
                *state
                    .stats
                    .throttled_by_operation
                    .entry(operation.to_owned())
                    .or_default() += 1;
                *state
                    .stats
                    .throttled_by_target
                    .entry(target.clone())
                    .or_default() += 1;
                return Err(Throttled {
                    target,
                    key,
                    capacity,
                });
            }
        }
        self.take_ids(&mut state, &ids, charges, now);
        Ok(())
    }

    /// Takes the charges whatever the buckets hold: a bucket may go below zero, a debt later
    /// requests wait out. For reads, whose cost is known only after DynamoDB answered.
    pub fn debit(&self, charges: &[Charge]) {
        self.debit_at(charges, self.now())
    }

    pub fn debit_at(&self, charges: &[Charge], now: Instant) {
        let mut state = self.state.lock().unwrap();
        for c in charges {
            self.refilled(&mut state, &bucket_id(c), now);
        }
        self.take(&mut state, charges, now);
    }

    /// Gives back charges taken but not owed (a write whose condition failed pays the base
    /// table only), up to each bucket's size. The hottest-second figures keep them.
    pub fn refund(&self, charges: &[Charge]) {
        let now = self.now();
        let mut state = self.state.lock().unwrap();
        for c in charges {
            let id = bucket_id(c);
            self.refilled(&mut state, &id, now);
            let size = self.size(c.capacity);
            if let Some(bucket) = state.buckets.get_mut(&id) {
                bucket.tokens = (bucket.tokens + c.units).min(size);
            }
            let consumed = state.stats.consumed.entry(c.target.clone()).or_default();
            match c.capacity {
                Capacity::Write => consumed.wcu -= c.units,
                Capacity::Read => consumed.rcu -= c.units,
            }
        }
    }

    pub fn stats(&self) -> Stats {
        self.state.lock().unwrap().stats.clone()
    }

    fn size(&self, capacity: Capacity) -> f64 {
        self.rate(capacity) * self.limits.burst_secs
    }

    fn rate(&self, capacity: Capacity) -> f64 {
        match capacity {
            Capacity::Write => self.limits.wcu_per_sec,
            Capacity::Read => self.limits.rcu_per_sec,
        }
    }

    /// The bucket's tokens after refilling it up to `now` (a new bucket is full).
    fn refilled(&self, state: &mut State, id: &BucketId, now: Instant) -> f64 {
        let size = self.size(id.2);
        let rate = self.rate(id.2);
        if !state.buckets.contains_key(id) {
            state.buckets.insert(
                id.clone(),
                Bucket {
                    tokens: size,
                    at: now,
                    window: 0,
                    window_units: 0.0,
                },
            );
        }
        let bucket = state.buckets.get_mut(id).expect("just made");
        // An `Instant` earlier than the bucket's (callers passing their own) refills nothing.
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(size);
        bucket.at = bucket.at.max(now);
        bucket.tokens
    }

    /// Takes charges from buckets already refilled up to `now`, and counts them.
    fn take(&self, state: &mut State, charges: &[Charge], now: Instant) {
        let ids: Vec<BucketId> = charges.iter().map(bucket_id).collect();
        self.take_ids(state, &ids, charges, now);
    }

    /// [`Self::take`] with each charge's bucket id made already.
    fn take_ids(&self, state: &mut State, ids: &[BucketId], charges: &[Charge], now: Instant) {
        let second = now.saturating_duration_since(self.origin).as_secs();
        for (id, c) in ids.iter().zip(charges) {
            let bucket = state.buckets.get_mut(id).expect("refilled first");
            bucket.tokens -= c.units;
            if bucket.window != second {
                bucket.window = second;
                bucket.window_units = 0.0;
            }
            bucket.window_units += c.units;
            let in_window = bucket.window_units;
            let stats = &mut state.stats;
            if !stats.consumed.contains_key(&c.target) {
                stats.consumed.insert(c.target.clone(), Consumed::default());
            }
            let consumed = stats.consumed.get_mut(&c.target).expect("just made");
            let hottest = match c.capacity {
                Capacity::Write => {
                    consumed.wcu += c.units;
                    &mut stats.hottest_write
                }
                Capacity::Read => {
                    consumed.rcu += c.units;
                    &mut stats.hottest_read
                }
            };
            if hottest.as_ref().is_none_or(|h| h.units_per_sec < in_window) {
                *hottest = Some(Hottest {
                    target: c.target.clone(),
                    key: c.key.clone(),
                    units_per_sec: in_window,
                });
            }
        }
    }
}

fn bucket_id(c: &Charge) -> BucketId {
    (c.target.clone(), c.key.clone(), c.capacity)
}

#[cfg(test)]
mod tests;
