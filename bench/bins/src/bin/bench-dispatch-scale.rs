//! `bench/dispatch-scale.sh`'s worker: N calls due in one second (or a 07:00 spike: 80 % in its
//! first second, the rest over the minute) through the dispatcher as deployed for big minutes,
//! on the limits models: the store is the embedded one behind DynamoDB's per-partition limits
//! (`koe_testkit::dynamodb::limited_store`), APNs the stand-in with its stream limit and latency
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

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use koe::clock::SystemClock;
use koe::config::dispatch::store_concurrency_for;
use koe::config::{Config, DispatchConfig, Vars};
use koe::dispatch::trigger::{DispatchTrigger, TriggerError};
use koe::dispatch::{Dispatcher, RunCause, RunReport};
use koe::domain::due::Part;
use koe::push::PushSender;
use koe::push::pool::{PoolSettings, PushPool};
use koe::store::memory::MemoryStore;
use koe::store::prelude::*;
use koe_bench::{percentile, seed_call};
use koe_testkit::dynamodb::held_replies::{HeldReplies, HeldStats, HeldStore};
use koe_testkit::dynamodb::limited_store::LimitedStore;
use koe_testkit::dynamodb::limits::{Limits, LimitsModel};
use koe_testkit::push::limited::{Answer, ApnsLimits, LimitedApns, call_key};

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

#[derive(Clone)]
struct Args {
    calls: usize,
    spike: bool,
    calls_per_worker: u32,
    csv: Option<String>,
    /// Held replies: the probability, how long, and the window (ms around the second).
    held: f64,
    hold_ms: u64,
    window_ms: (i64, i64),
    /// `DISPATCH_STORE_CONCURRENCY` for every process, instead of each role's default.
    store_concurrency: Option<usize>,
    /// Worker mode: this part, the second the calls start at (epoch ms), where to write.
    part: Option<(u32, u32)>,
    t0_ms: Option<i64>,
    out: Option<PathBuf>,
}

fn args() -> Args {
    let mut args = Args {
        calls: 10_000,
        spike: false,
        calls_per_worker: 5_000,
        csv: None,
        held: 0.0,
        hold_ms: 1500,
        window_ms: (-1500, 3500),
        store_concurrency: None,
        part: None,
        t0_ms: None,
        out: None,
    };
    let mut it = std::env::args().skip(1);
    let number = |it: &mut std::iter::Skip<std::env::Args>, name: &str| -> i64 {
        it.next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} N"))
    };
    let mut of = None;
    let mut index = None;
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--calls" => args.calls = number(&mut it, "--calls") as usize,
            "--spike" => args.spike = true,
            "--calls-per-worker" => {
                args.calls_per_worker = number(&mut it, "--calls-per-worker") as u32
            }
            "--csv" => args.csv = it.next(),
            "--held" => {
                args.held = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--held F (0 to 1)")
            }
            "--hold-ms" => args.hold_ms = number(&mut it, "--hold-ms") as u64,
            "--window-ms" => {
                let window = it.next().expect("--window-ms FROM,UNTIL");
                let (from, until) = window.split_once(',').expect("--window-ms FROM,UNTIL");
                args.window_ms = (
                    from.parse().expect("--window-ms FROM"),
                    until.parse().expect("--window-ms UNTIL"),
                );
            }
            "--store-concurrency" => {
                args.store_concurrency = Some(number(&mut it, "--store-concurrency") as usize)
            }
            "--part" => index = Some(number(&mut it, "--part") as u32),
            "--of" => of = Some(number(&mut it, "--of") as u32),
            "--t0-ms" => args.t0_ms = Some(number(&mut it, "--t0-ms")),
            "--out" => args.out = it.next().map(PathBuf::from),
            other => panic!("unknown argument {other}"),
        }
    }
    args.part = index.zip(of);
    args
}

/// When call `i` of `n` is due, after the spike's second `t0`: all within its first second, or
/// (a spike) 80 % within it and the rest spread over the minute.
fn due(t0: DateTime<Utc>, i: usize, n: usize, spike: bool) -> DateTime<Utc> {
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
async fn seed(store: &MemoryStore, args: &Args, t0: DateTime<Utc>) -> HashMap<u64, DateTime<Utc>> {
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
const COORDINATOR_MB: u64 = 256;
const PART_MB: u64 = 1769;

fn settings(args: &Args, t0: DateTime<Utc>, memory_mb: u64) -> DispatchConfig {
    let last = t0 + chrono::Duration::seconds(if args.spike { 60 } else { 1 });
    let mut settings = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    settings.window = (last - Utc::now() + chrono::Duration::seconds(3))
        .to_std()
        .expect("the window is ahead");
    settings.calls_per_worker = args.calls_per_worker;
    settings.max_workers = 256;
    settings.concurrency = args.calls_per_worker as usize;
    settings.store_concurrency = args
        .store_concurrency
        .unwrap_or_else(|| store_concurrency_for(Some(memory_mb)));
    settings
}

/// The store the dispatcher uses: the limited one, behind held replies if asked for (the
/// window's instants from the second `t0`, on the wall clock; draws seeded per process).
fn dispatch_store(
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
fn dispatcher(store: Arc<dyn Store>, apns: &LimitedApns, settings: DispatchConfig) -> Dispatcher {
    Dispatcher::new(store, pool(apns), Arc::new(SystemClock), settings, "bench")
}

fn pool(apns: &LimitedApns) -> Arc<dyn PushSender> {
    let apns = apns.clone();
    Arc::new(PushPool::new(
        Arc::new(move || apns.connection()),
        PoolSettings::default(),
    ))
}

/// What one process measured, as it hands it to the coordinator.
#[derive(Default)]
struct Measured {
    /// (call, lateness in ms) of each accepted push.
    pushes: Vec<(u64, f64)>,
    sent: u32,
    failed: u32,
    lost: u32,
    released: u32,
    resolved: u32,
    store_errors: u32,
    held: HeldStats,
    throttled: u64,
    wcu: f64,
    rcu: f64,
    hottest_write: f64,
    connections: usize,
    queued: usize,
}

impl Measured {
    fn of(
        report: &RunReport,
        store: &LimitedStore,
        held: Option<&HeldStore>,
        apns: &LimitedApns,
        scheduled: &HashMap<u64, DateTime<Utc>>,
    ) -> Measured {
        let anchor = (tokio::time::Instant::now(), Utc::now());
        let wall = |t: tokio::time::Instant| {
            anchor.1 - chrono::Duration::from_std(anchor.0 - t).unwrap_or_default()
        };
        let pushes = apns
            .records()
            .into_iter()
            .filter(|r| r.answer == Answer::Accepted)
            .map(|r| {
                let late = (wall(r.left) - scheduled[&r.call])
                    .num_microseconds()
                    .unwrap();
                (r.call, late as f64 / 1000.0)
            })
            .collect();
        let stats = store.model().stats();
        let (wcu, rcu) = stats
            .consumed
            .values()
            .fold((0.0, 0.0), |(w, r), c| (w + c.wcu, r + c.rcu));
        let apns_stats = apns.stats();
        Measured {
            pushes,
            sent: report.sent,
            failed: report.failed,
            lost: report.lost + report.abandoned,
            released: report.released,
            resolved: report.resolved,
            store_errors: report.store_errors,
            held: held.map(HeldStore::stats).unwrap_or_default(),
            throttled: stats.throttled(),
            wcu,
            rcu,
            hottest_write: stats.hottest_write.map_or(0.0, |h| h.units_per_sec),
            connections: apns_stats.connections_used,
            queued: apns_stats.queued,
        }
    }

    fn write(&self, path: &PathBuf) {
        let mut out = format!(
            "{} {} {} {} {} {} {} {} {} {} {} {} {} {} {}\n",
            self.sent,
            self.failed,
            self.lost,
            self.released,
            self.resolved,
            self.held.held,
            self.held.timed_out,
            self.held.failed,
            self.store_errors,
            self.throttled,
            self.wcu,
            self.rcu,
            self.hottest_write,
            self.connections,
            self.queued
        );
        for (call, late) in &self.pushes {
            out.push_str(&format!("{call} {late}\n"));
        }
        std::fs::write(path, out).expect("write the part's results");
    }

    fn read(path: &PathBuf) -> Measured {
        let text = std::fs::read_to_string(path).expect("a part's results");
        let mut lines = text.lines();
        let head: Vec<f64> = lines
            .next()
            .unwrap()
            .split(' ')
            .map(|v| v.parse().unwrap())
            .collect();
        Measured {
            sent: head[0] as u32,
            failed: head[1] as u32,
            lost: head[2] as u32,
            released: head[3] as u32,
            resolved: head[4] as u32,
            held: HeldStats {
                held: head[5] as u64,
                timed_out: head[6] as u64,
                failed: head[7] as u64,
            },
            store_errors: head[8] as u32,
            throttled: head[9] as u64,
            wcu: head[10],
            rcu: head[11],
            hottest_write: head[12],
            connections: head[13] as usize,
            queued: head[14] as usize,
            pushes: lines
                .map(|l| {
                    let (call, late) = l.split_once(' ').unwrap();
                    (call.parse().unwrap(), late.parse().unwrap())
                })
                .collect(),
        }
    }

    fn add(&mut self, other: Measured) {
        self.pushes.extend(other.pushes);
        self.sent += other.sent;
        self.failed += other.failed;
        self.lost += other.lost;
        self.released += other.released;
        self.resolved += other.resolved;
        self.held.held += other.held.held;
        self.held.timed_out += other.held.timed_out;
        self.held.failed += other.held.failed;
        self.store_errors += other.store_errors;
        self.throttled += other.throttled;
        self.wcu += other.wcu;
        self.rcu += other.rcu;
        self.hottest_write = self.hottest_write.max(other.hottest_write);
        self.connections += other.connections;
        self.queued += other.queued;
    }
}

/// A part's process: the same reservations, this part of the window, results to `--out`.
async fn run_part(args: Args, (index, of): (u32, u32)) {
    let t0 = DateTime::from_timestamp_millis(args.t0_ms.expect("--t0-ms")).unwrap();
    let inner = Arc::new(MemoryStore::new());
    let scheduled = seed(&inner, &args, t0).await;
    assert!(
        Utc::now() < t0 - chrono::Duration::seconds(4),
        "part {index}: set-up ended too late to select in time"
    );
    let store = Arc::new(LimitedStore::new(
        inner,
        LimitsModel::new(Limits::default()),
    ));
    let (dispatched, held) = dispatch_store(&store, &args, t0, 2 + u64::from(index));
    let apns = LimitedApns::new(ApnsLimits::default());
    let dispatcher = dispatcher(dispatched, &apns, settings(&args, t0, PART_MB));
    let part = Part::new(index, of).expect("--part < --of");
    let report = dispatcher.run_part(RunCause::Part, part).await;
    Measured::of(&report, &store, held.as_deref(), &apns, &scheduled)
        .write(args.out.as_ref().expect("--out"));
}

/// Starts each handed-out part as a process of its own.
struct ProcessTrigger {
    args: Args,
    t0: DateTime<Utc>,
    dir: PathBuf,
    started: Mutex<Vec<(Child, PathBuf)>>,
}

#[async_trait]
impl DispatchTrigger for ProcessTrigger {
    async fn request_run(&self) -> Result<(), TriggerError> {
        Err(TriggerError("not used".into()))
    }

    async fn hand_out(&self, parts: &[Part]) -> Result<(), TriggerError> {
        let me = std::env::current_exe().map_err(|e| TriggerError(e.to_string()))?;
        for part in parts {
            let out = self
                .dir
                .join(format!("part-{}-of-{}.txt", part.index, part.of));
            let mut command = Command::new(&me);
            command
                .args(["--calls", &self.args.calls.to_string()])
                .args([
                    "--calls-per-worker",
                    &self.args.calls_per_worker.to_string(),
                ])
                .args([
                    "--part",
                    &part.index.to_string(),
                    "--of",
                    &part.of.to_string(),
                ])
                .args(["--t0-ms", &self.t0.timestamp_millis().to_string()])
                .args(["--held", &self.args.held.to_string()])
                .args(["--hold-ms", &self.args.hold_ms.to_string()])
                .args([
                    "--window-ms",
                    &format!("{},{}", self.args.window_ms.0, self.args.window_ms.1),
                ])
                .arg("--out")
                .arg(&out)
                .stdout(Stdio::null());
            if self.args.spike {
                command.arg("--spike");
            }
            if let Some(n) = self.args.store_concurrency {
                command.args(["--store-concurrency", &n.to_string()]);
            }
            let child = command.spawn().map_err(|e| TriggerError(e.to_string()))?;
            self.started.lock().unwrap().push((child, out));
        }
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = args();
    if let Some(part) = args.part {
        return run_part(args, part).await;
    }
    // Every part process makes the reservations too, at once on 2 cores: leave them the time.
    let parts_guess = args.calls.div_ceil(args.calls_per_worker as usize).max(1) as i64;
    let lead = chrono::Duration::milliseconds(6_000 + (args.calls as i64) * (1 + parts_guess) / 60);
    let t0 = DateTime::from_timestamp((Utc::now() + lead).timestamp() + 1, 0).unwrap();
    let started = Instant::now();
    let inner = Arc::new(MemoryStore::new());
    let scheduled = seed(&inner, &args, t0).await;
    let store = Arc::new(LimitedStore::new(
        inner,
        LimitsModel::new(Limits::default()),
    ));
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
         held_timeouts={} held_failures={} throttled={} store_errors={} wcu_per_call={:.2} rcu_per_call={:.2} hottest_write_per_s={:.0} \
         apns_connections={} apns_queued={} lambda_gb_s={:.0} usd_per_1000={:.4} took_s={:.0}",
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
        all.store_errors,
        all.wcu / n,
        all.rcu / n,
        all.hottest_write,
        all.connections,
        all.queued,
        gb_s,
        usd / n * 1000.0,
        started.elapsed().as_secs_f64(),
    );
}
