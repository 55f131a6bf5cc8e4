//! `bench/dispatch-scale.sh`'s worker: N calls due in one second (or a 07:00 spike: 80 % in its
//! first second, the rest over the minute) through the dispatcher as deployed for big minutes,
//! on the limits models: the store is the embedded one behind DynamoDB's per-partition and
//! table-level limits (`koe_testkit::dynamodb::limited_store`; `KOE_LIMITS_WARM`,
//! `KOE_LIMITS_QUOTA`, `KOE_LIMITS_SCALE` change them: `Limits::from_env`), APNs the stand-in with its stream limit and latency
//! (`koe_testkit::push::limited`).
//!
//! The coordinating run splits the window into parts of 5,000 calls, and each part runs in a
//! process of its own (this binary again, `--part i --of w`), as its own Lambda invocation
//! would: its own runtime, dispatcher, APNs connections, and its own copy of the models. Every
//! process makes the same reservations (same ids, same order, so the same shards); a part only
//! touches its own shards' items and its own devices, so its model sees every partition it uses
//! as the shared DynamoDB would (the minutes' count items, read by all parts, are the one
//! exception: a few reads each per re-selection). Should two parts ever take the same call, it
//! shows as a duplicate.
//!
//! With `--held F --hold-ms H --window-ms A,B` (`bench/slow-replies.sh`), every process puts its
//! store behind held replies (`koe_testkit::dynamodb::held_replies`): a request the dispatcher
//! makes from A ms to B ms around the second has its reply held H ms with probability F (carried
//! out at once, answered late; past the adapter's attempt timeout, a store error).
//!
//! Prints one `RESULT key=value ...` line; with `--csv FILE`, each push's lateness (ms after its
//! `scheduledAt` when it left, i.e. had an APNs stream) for `bench/plot-lateness.py`.

mod args;
mod measured;
mod parts;
mod setup;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::{DateTime, Utc};
use koe::dispatch::RunCause;
use koe::store::memory::MemoryStore;
use koe_bench::percentile;
use koe_testkit::dynamodb::limited_store::LimitedStore;
use koe_testkit::dynamodb::limits::Limits;
use koe_testkit::push::limited::{ApnsLimits, LimitedApns};

use crate::args::args;
use crate::measured::Measured;
use crate::parts::{ProcessTrigger, run_part};
use crate::setup::{
    COORDINATOR_MB, RATES_FROM_S, dispatch_store, dispatcher, model, seed, settings, write_budget,
};

/// On-demand prices in ap-northeast-1 (USD, after AWS's November 2024 DynamoDB cut), as
/// docs/scale.md states them.
const USD_PER_WRITE_UNIT: f64 = 0.715e-6;
const USD_PER_READ_UNIT: f64 = 0.1425e-6;
const USD_PER_LAMBDA_GB_S: f64 = 0.000_013_333_4; // arm64
const USD_PER_LAMBDA_REQUEST: f64 = 0.2e-6;
const USD_PER_EVENT: f64 = 1.0e-6;
/// The deployed functions: the coordinator (DispatchFunction) and a part (DispatchPartFunction),
/// each running its 70 s window.
const COORDINATOR_GB: f64 = 0.256;
const PART_GB: f64 = 1.769;
const WINDOW_S: f64 = 70.0;
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = args();
    if let Some(part) = args.part {
        return run_part(args, part).await;
    }
    // Every part process makes the reservations too, at once on 2 cores: leave them the time.
    let parts_guess = args.calls.div_ceil(args.calls_per_worker as usize).max(1) as i64;
    // The run starts at least the longest planned lead (and 2 s) ahead, as the every-minute
    // schedule starts it a minute ahead of a round minute.
    let lead = chrono::Duration::milliseconds(
        koe::dispatch::plan::LONGEST_LEAD.num_milliseconds()
            + 2_000
            + (args.calls as i64) * (1 + parts_guess) / 60,
    );
    let t0 = DateTime::from_timestamp((Utc::now() + lead).timestamp() + 1, 0).unwrap();
    let started = Instant::now();
    let inner = Arc::new(MemoryStore::new());
    let scheduled = seed(&inner, &args, t0).await;
    let store = Arc::new(LimitedStore::new(inner, model(Limits::from_env(), t0)));
    let (dispatched, held) = dispatch_store(&store, &args, t0, 1);
    let apns = LimitedApns::new(ApnsLimits::default());
    let dir = std::env::temp_dir().join(format!("koe-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trigger = Arc::new(ProcessTrigger {
        args: args.clone(),
        t0,
        dir: dir.clone(),
        started: Mutex::new(Vec::new()),
    });
    let settings = settings(&args, t0, COORDINATOR_MB);
    let coordinator = dispatcher(dispatched, &apns, settings).fanning_out(trigger.clone());
    let coordinated = coordinator.coordinate(RunCause::Schedule).await;
    let mut all = Measured::of(&coordinated, &store, held.as_deref(), &apns, &scheduled);
    let children = std::mem::take(&mut *trigger.started.lock().unwrap());
    let parts = children.len().max(1);
    for (mut child, out) in children {
        let status = child.wait().expect("a part process");
        assert!(status.success(), "a part failed: {status}");
        all.add(Measured::read(&out));
    }
    let _ = std::fs::remove_dir_all(&dir);

    let mut accepted: HashMap<u64, usize> = HashMap::new();
    let mut lateness = Vec::with_capacity(all.pushes.len());
    for (call, late) in &all.pushes {
        *accepted.entry(*call).or_default() += 1;
        lateness.push(*late);
    }
    let early = lateness.iter().filter(|l| **l < 0.0).count();
    lateness.sort_by(f64::total_cmp);
    let duplicates: usize = accepted.values().map(|n| n - 1).sum();
    let missed = args.calls - accepted.len();
    let once = accepted.values().filter(|n| **n == 1).count();
    let more = accepted.values().filter(|n| **n > 1).count();
    if let Some(path) = &args.csv {
        let mut out = String::from("lateness_ms\n");
        for l in &lateness {
            out.push_str(&format!("{l:.3}\n"));
        }
        std::fs::write(path, out).expect("write the csv");
    }
    let n = args.calls as f64;
    let handed = f64::from(coordinated.handed_out);
    // Every table's and index's units, second by second around the spike (all processes added
    // up), and the most in any second against the budget.
    let budget = f64::from(write_budget());
    let mut most: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for ((second, target), (w, r)) in &all.rates {
        let from_t0 = *second as i64 - RATES_FROM_S;
        println!("RATE second={from_t0:+} target={target} wru={w:.0} rru={r:.0}");
        let m = most.entry(target.clone()).or_default();
        (m.0, m.1) = (m.0.max(*w), m.1.max(*r));
    }
    let over_budget = all.rates.values().filter(|(w, _)| *w > budget).count();
    let most_line: Vec<String> = most
        .iter()
        .map(|(t, (w, r))| format!("{t}:{w:.0}/{r:.0}"))
        .collect();
    let gb_s = COORDINATOR_GB * WINDOW_S + PART_GB * WINDOW_S * handed;
    let usd = all.wcu * USD_PER_WRITE_UNIT
        + all.rcu * USD_PER_READ_UNIT
        + gb_s * USD_PER_LAMBDA_GB_S
        + (1.0 + handed) * USD_PER_LAMBDA_REQUEST
        + handed * USD_PER_EVENT;
    println!(
        "RESULT calls={} spike={} parts={} processes={} sent={} p50_ms={:.1} p99_ms={:.1} \
         max_ms={:.1} early={} duplicates={} missed={} once={} twice={} never={} failed={} \
         lost={} released={} resolved={} held={} hold_ms={} window_ms={},{} held_replies={} \
         held_timeouts={} held_failures={} throttled={} throttled_table={} store_errors={} wcu_per_call={:.2} rcu_per_call={:.2} hottest_write_per_s={:.0} \
         apns_connections={} apns_queued={} lambda_gb_s={:.0} usd_per_1000={:.4} took_s={:.0} \
         write_budget={:.0} most_units_per_s={} seconds_over_budget={}",
        args.calls,
        args.spike,
        parts,
        if coordinated.handed_out > 0 { parts } else { 0 },
        all.sent,
        percentile(&lateness, 50),
        percentile(&lateness, 99),
        lateness.last().copied().unwrap_or(f64::NAN),
        early,
        duplicates,
        missed,
        once,
        more,
        missed,
        all.failed,
        all.lost,
        all.released,
        all.resolved,
        args.held,
        args.hold_ms,
        args.window_ms.0,
        args.window_ms.1,
        all.held.held,
        all.held.timed_out,
        all.held.failed,
        all.throttled,
        all.throttled_table,
        all.store_errors,
        all.wcu / n,
        all.rcu / n,
        all.hottest_write,
        all.connections,
        all.queued,
        gb_s,
        usd / n * 1000.0,
        started.elapsed().as_secs_f64(),
        budget,
        most_line.join(","),
        over_budget,
    );
}
