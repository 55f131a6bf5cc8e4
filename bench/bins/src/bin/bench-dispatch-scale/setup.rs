//! One process's set-up: the reservations, the dispatch settings, the limited store and APNs.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use koe::dispatch::Dispatcher;
use koe::platform::clock::SystemClock;
use koe::platform::config::dispatch::store_concurrency_for;
use koe::platform::config::{Config, DispatchConfig, Vars};
use koe::push::PushSender;
use koe::push::pool::{PoolSettings, PushPool};
use koe::store::memory::MemoryStore;
use koe::store::prelude::*;
use koe_bench::seed_call;
use koe_testkit::dynamodb::held_replies::{HeldReplies, HeldStore};
use koe_testkit::dynamodb::limited_store::LimitedStore;
use koe_testkit::dynamodb::limits::{Limits, LimitsModel};
use koe_testkit::push::limited::{LimitedApns, call_key};

use crate::args::Args;

/// When call `i` of `n` is due, after the spike's second `t0`: all within its first second, or
/// (a spike) 80 % within it and the rest spread over the minute.
pub(super) fn due(t0: DateTime<Utc>, i: usize, n: usize, spike: bool) -> DateTime<Utc> {
    let in_first = if spike { n * 4 / 5 } else { n };
    let ms = if i < in_first {
        (i as i64 * 1000) / in_first.max(1) as i64
    } else {
        1000 + ((i - in_first) as i64 * 59_000) / (n - in_first).max(1) as i64
    };
    t0 + chrono::Duration::milliseconds(ms)
}

/// The benchmark's reservations, the same in every process (ids from their index, made in
/// order, so each lands in the same shard everywhere); the second each call is due, by
/// [`call_key`].
pub(super) async fn seed(
    store: &MemoryStore,
    args: &Args,
    t0: DateTime<Utc>,
) -> HashMap<u64, DateTime<Utc>> {
    let made = t0 - chrono::Duration::hours(1);
    let mut scheduled = HashMap::with_capacity(args.calls);
    for i in 0..args.calls {
        let at = due(t0, i, args.calls, args.spike);
        let r = seed_call(store, i, at, made, false).await;
        scheduled.insert(call_key(r.call_id.as_str()), at);
    }
    scheduled
}

/// The deployed functions' memory (template.yaml): the coordinator's and a part's, which set
/// their store concurrency (`DISPATCH_STORE_CONCURRENCY`'s default).
pub(super) const COORDINATOR_MB: u64 = 256;
pub(super) const PART_MB: u64 = 1769;

/// Seconds before the spike's second `t0` that the models' per-second rates count from.
pub(super) const RATES_FROM_S: i64 = 60;

/// A limits model (`limits`: this process's share) whose seconds are the wall clock's, from
/// [`RATES_FROM_S`] before `t0`, so that every process's rates add up second by second.
pub(super) fn model(limits: Limits, t0: DateTime<Utc>) -> LimitsModel {
    // Seconds before the origin (a spike set up more than a minute ahead) count in its first.
    let back = Utc::now() - (t0 - chrono::Duration::seconds(RATES_FROM_S));
    let now = std::time::Instant::now();
    let origin = match back.to_std() {
        Ok(back) => now - back,
        Err(_) => now + (-back).to_std().expect("a future origin"),
    };
    LimitsModel::new(limits).with_seconds_from(origin)
}

/// The write units a second the tables serve (warm throughput, capped by the quota), as the
/// deployed dispatcher is told (`DISPATCH_WRITE_BUDGET`).
pub(super) fn write_budget() -> u32 {
    let l = Limits::from_env();
    l.table_write_units.min(l.quota_write_units) as u32
}

pub(super) fn settings(args: &Args, t0: DateTime<Utc>, memory_mb: u64) -> DispatchConfig {
    let last = t0 + chrono::Duration::seconds(if args.spike { 60 } else { 1 });
    let mut settings = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    settings.window = (last - Utc::now() + chrono::Duration::seconds(3))
        .to_std()
        .expect("the window is ahead");
    settings.calls_per_worker = args.calls_per_worker;
    settings.write_budget = write_budget();
    settings.max_workers = 256;
    settings.concurrency = args.calls_per_worker as usize;
    settings.store_concurrency = args
        .store_concurrency
        .unwrap_or_else(|| store_concurrency_for(Some(memory_mb)));
    settings
}

/// The store the dispatcher uses: the limited one, behind held replies if asked for (the
/// window's instants from the second `t0`, on the wall clock; draws seeded per process).
pub(super) fn dispatch_store(
    limited: &Arc<LimitedStore>,
    args: &Args,
    t0: DateTime<Utc>,
    seed: u64,
) -> (Arc<dyn Store>, Option<Arc<HeldStore>>) {
    if args.held <= 0.0 {
        return (limited.clone(), None);
    }
    let now = (tokio::time::Instant::now(), Utc::now());
    let at = |ms: i64| {
        let from_now = t0 + chrono::Duration::milliseconds(ms) - now.1;
        now.0 + from_now.to_std().unwrap_or_default()
    };
    let held = Arc::new(HeldStore::new(
        limited.clone(),
        HeldReplies {
            fraction: args.held,
            hold: std::time::Duration::from_millis(args.hold_ms),
            from: at(args.window_ms.0),
            until: at(args.window_ms.1),
            seed,
        },
    ));
    (held.clone(), Some(held))
}

/// A dispatcher on `store` and the stand-in APNs (through the pool), by the wall clock.
pub(super) fn dispatcher(
    store: Arc<dyn Store>,
    apns: &LimitedApns,
    settings: DispatchConfig,
) -> Dispatcher {
    Dispatcher::new(store, pool(apns), Arc::new(SystemClock), settings, "bench")
}

pub(super) fn pool(apns: &LimitedApns) -> Arc<dyn PushSender> {
    let apns = apns.clone();
    Arc::new(PushPool::new(
        Arc::new(move || apns.connection()),
        PoolSettings::default(),
    ))
}
