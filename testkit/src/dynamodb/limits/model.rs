//! The token buckets: charging a request all or nothing, debts, refunds, refill and the stats.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Capacity, Charge, Consumed, Hottest, Limits, Stats, Target, Throttled};

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
