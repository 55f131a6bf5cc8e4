//! The token buckets: charging a request all or nothing, debts, refunds, refill and the stats.
//! A partition's bucket and its table's (or GSI's) bucket are alike: refilled continuously at
//! their rate, holding at most `burst_secs` of it; a request pays both or neither.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Capacity, Charge, Consumed, Hottest, Level, Limits, Stats, Target, Throttled};

type BucketId = (Target, String, Capacity);
/// A table's or GSI's own bucket, over all its partitions.
type TableId = (Target, Capacity);

struct Bucket {
    tokens: f64,
    at: Instant,
    /// The whole second (since the model's start) `window_units` were consumed in.
    window: u64,
    window_units: f64,
}

impl Bucket {
    fn full(size: f64, now: Instant) -> Bucket {
        Bucket {
            tokens: size,
            at: now,
            window: 0,
            window_units: 0.0,
        }
    }

    /// Refills up to `now` at `rate`, up to `size`; the tokens then held.
    fn refill(&mut self, rate: f64, size: f64, now: Instant) -> f64 {
        // An `Instant` earlier than the bucket's (callers passing their own) refills nothing.
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(size);
        self.at = self.at.max(now);
        self.tokens
    }
}

struct State {
    buckets: HashMap<BucketId, Bucket>,
    tables: HashMap<TableId, Bucket>,
    stats: Stats,
}

/// The buckets of every partition seen so far, and the stats. Cheap to share (`Arc`).
pub struct LimitsModel {
    limits: Limits,
    origin: Instant,
    clock: ModelClock,
    state: Mutex<State>,
}

/// Where a model reads its time.
enum ModelClock {
    /// The real clock.
    Real,
    /// A clock that moves only when told ([`LimitsModel::advance`]).
    Frozen(Mutex<Instant>),
    /// Tokio's time from this instant on (paused in a test: the model's seconds are the
    /// dispatcher's, however slowly the machine runs them).
    Tokio(tokio::time::Instant),
}

impl LimitsModel {
    /// A model on the real clock.
    pub fn new(limits: Limits) -> LimitsModel {
        Self::build(limits, |_| ModelClock::Real)
    }

    /// A model whose clock stands still until [`LimitsModel::advance`]: for tests that must not
    /// depend on how fast the machine sends their requests.
    pub fn with_frozen_clock(limits: Limits) -> LimitsModel {
        Self::build(limits, |origin| ModelClock::Frozen(Mutex::new(origin)))
    }

    /// A model on tokio's time (a paused test's, with `testkit::clock::TokioClock` as the
    /// dispatcher's clock): its seconds are the run's own, not the machine's.
    pub fn on_tokio_time(limits: Limits) -> LimitsModel {
        Self::build(limits, |_| ModelClock::Tokio(tokio::time::Instant::now()))
    }

    fn build(limits: Limits, clock: impl FnOnce(Instant) -> ModelClock) -> LimitsModel {
        let origin = Instant::now();
        LimitsModel {
            limits,
            origin,
            clock: clock(origin),
            state: Mutex::new(State {
                buckets: HashMap::new(),
                tables: HashMap::new(),
                stats: Stats::default(),
            }),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The model with its seconds ([`Stats::by_second`]) counted from `origin`, an instant at
    /// or before its first request (processes that each model their share count the same
    /// wall-clock seconds).
    pub fn with_seconds_from(mut self, origin: Instant) -> LimitsModel {
        self.origin = origin;
        self
    }

    /// The model's time: the real clock's, or the frozen one's.
    pub fn now(&self) -> Instant {
        match &self.clock {
            ModelClock::Real => Instant::now(),
            ModelClock::Frozen(now) => *now.lock().unwrap(),
            ModelClock::Tokio(start) => self.origin + start.elapsed(),
        }
    }

    /// Moves a frozen clock forward; panics on any other.
    pub fn advance(&self, by: Duration) {
        let ModelClock::Frozen(frozen) = &self.clock else {
            panic!("advance: the model's clock is not frozen");
        };
        *frozen.lock().unwrap() += by;
    }

    /// Takes every charge of one request of `operation`, or none: if any partition, or any
    /// table or GSI as a whole, cannot pay its (summed) units, nothing is taken, the throttle is
    /// counted and the first that could not pay named (partitions are checked first).
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
        // And per table or GSI as a whole.
        let mut tables: Vec<(TableId, f64)> = Vec::new();
        for c in charges {
            let id = (c.target.clone(), c.capacity);
            match tables.iter_mut().find(|(t, _)| *t == id) {
                Some((_, units)) => *units += c.units,
                None => tables.push((id, c.units)),
            }
        }
        let mut state = self.state.lock().unwrap();
        let mut short = None;
        for (id, units) in &wanted {
            if self.refilled(&mut state, id, now) < *units {
                let (target, key, capacity) = (*id).clone();
                short = Some(Throttled {
                    target,
                    key,
                    capacity,
                    level: Level::Partition,
                });
                break;
            }
        }
        if short.is_none() {
            for ((target, capacity), units) in &tables {
                let id = (target.clone(), *capacity);
                if self.table_refilled(&mut state, &id, now) < *units {
                    let quota = self.limits.table_rate(*capacity).1;
                    short = Some(Throttled {
                        target: target.clone(),
                        key: String::new(),
                        capacity: *capacity,
                        level: if quota { Level::Quota } else { Level::Table },
                    });
                    break;
                }
            }
        }
        if let Some(throttled) = short {
            let stats = &mut state.stats;
            *stats
                .throttled_by_operation
                .entry(operation.to_owned())
                .or_default() += 1;
            *stats
                .throttled_by_target
                .entry(throttled.target.clone())
                .or_default() += 1;
            if throttled.level != Level::Partition {
                *stats
                    .throttled_table_by_target
                    .entry(throttled.target.clone())
                    .or_default() += 1;
            }
            return Err(throttled);
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
            self.table_refilled(&mut state, &(c.target.clone(), c.capacity), now);
        }
        self.take(&mut state, charges, now);
    }

    /// Gives back charges taken but not owed (a write whose condition failed pays the base
    /// table only), up to each bucket's size, partition's and table's. The hottest-second and
    /// per-second figures keep them.
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
            let table = (c.target.clone(), c.capacity);
            self.table_refilled(&mut state, &table, now);
            let size = self.table_size(c.capacity);
            if let Some(bucket) = state.tables.get_mut(&table) {
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

    /// A table's or GSI's bucket size: its rate (warm throughput, capped by the quota) for
    /// `burst_secs`, as a partition's.
    fn table_size(&self, capacity: Capacity) -> f64 {
        self.limits.table_rate(capacity).0 * self.limits.burst_secs
    }

    /// The partition bucket's tokens after refilling it up to `now` (a new bucket is full).
    fn refilled(&self, state: &mut State, id: &BucketId, now: Instant) -> f64 {
        let (size, rate) = (self.size(id.2), self.rate(id.2));
        if !state.buckets.contains_key(id) {
            state.buckets.insert(id.clone(), Bucket::full(size, now));
        }
        let bucket = state.buckets.get_mut(id).expect("just made");
        bucket.refill(rate, size, now)
    }

    /// [`Self::refilled`] for a table's or GSI's own bucket.
    fn table_refilled(&self, state: &mut State, id: &TableId, now: Instant) -> f64 {
        let (size, rate) = (self.table_size(id.1), self.limits.table_rate(id.1).0);
        if !state.tables.contains_key(id) {
            state.tables.insert(id.clone(), Bucket::full(size, now));
        }
        let bucket = state.tables.get_mut(id).expect("just made");
        bucket.refill(rate, size, now)
    }

    /// Takes charges from buckets (partitions' and tables') already refilled up to `now`, and
    /// counts them.
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
            let table = (c.target.clone(), c.capacity);
            state.tables.get_mut(&table).expect("refilled first").tokens -= c.units;
            let stats = &mut state.stats;
            let this_second = stats.by_second.entry(second).or_default();
            if !this_second.contains_key(&c.target) {
                this_second.insert(c.target.clone(), Consumed::default());
            }
            let rate = this_second.get_mut(&c.target).expect("just made");
            match c.capacity {
                Capacity::Write => rate.wcu += c.units,
                Capacity::Read => rate.rcu += c.units,
            }
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
