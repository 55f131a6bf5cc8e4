//! `bench/dispatch-scale.sh`'s worker: N calls due in one second (or a 07:00 spike: most in its
//! first second, the rest over the minute) through the dispatcher as deployed for big minutes,
//! on the limits models: the store is the embedded one behind DynamoDB's per-partition limits
//! (`koe_testkit::dynamodb::limited_store`), APNs the stand-in with its stream limit and latency
//! (`koe_testkit::push::limited`). A coordinating run splits the window into parts (5,000 calls
//! each); each part runs as its own invocation would: its own OS thread with a single-threaded
//! runtime (one vCPU's worth), its own dispatcher, in-flight set and APNs connection pool.
//!
//! Prints one `RESULT key=value ...` line; with `--csv FILE`, each push's lateness (ms after its
//! `scheduledAt` when it left, i.e. had an APNs stream) for `bench/plot-lateness.py`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use koe::clock::SystemClock;
use koe::config::{Config, DispatchConfig, Vars};
use koe::dispatch::trigger::{DispatchTrigger, TriggerError};
use koe::dispatch::{Dispatcher, RunCause, RunReport};
use koe::domain::device::{Device, DeviceId, PushEnvironment, VoipToken};
use koe::domain::due::Part;
use koe::domain::reservation::{Reservation, ScheduledAt};
use koe::push::PushSender;
use koe::push::pool::{PoolSettings, PushPool};
use koe::store::Store;
use koe::store::memory::MemoryStore;
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

struct Args {
    calls: usize,
    spike: bool,
    calls_per_worker: u32,
    csv: Option<String>,
}

fn args() -> Args {
    let mut args = Args {
        calls: 10_000,
        spike: false,
        calls_per_worker: 5_000,
        csv: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--calls" => args.calls = it.next().and_then(|v| v.parse().ok()).expect("--calls N"),
            "--spike" => args.spike = true,
            "--calls-per-worker" => {
                args.calls_per_worker = it.next().and_then(|v| v.parse().ok()).expect("N")
            }
            "--csv" => args.csv = it.next(),
            other => panic!("unknown argument {other}"),
        }
    }
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

/// Runs each handed-out part on a thread of its own, as its own invocation would run.
struct ThreadTrigger {
    store: Arc<dyn Store>,
    apns: LimitedApns,
    settings: DispatchConfig,
    runs: Mutex<Vec<std::thread::JoinHandle<(RunReport, Duration)>>>,
}

impl ThreadTrigger {
    fn pool(apns: &LimitedApns) -> Arc<dyn PushSender> {
        let apns = apns.clone();
        Arc::new(PushPool::new(
            Arc::new(move || apns.connection()),
            PoolSettings::default(),
        ))
    }
}

#[async_trait]
impl DispatchTrigger for ThreadTrigger {
    async fn request_run(&self) -> Result<(), TriggerError> {
        Err(TriggerError("not used".into()))
    }

    async fn hand_out(&self, parts: &[Part]) -> Result<(), TriggerError> {
        for part in parts.iter().copied() {
            let (store, settings) = (self.store.clone(), self.settings.clone());
            let push = Self::pool(&self.apns);
            self.runs.lock().unwrap().push(std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                let started = Instant::now();
                let dispatcher =
                    Dispatcher::new(store, push, Arc::new(SystemClock), settings, "bench");
                let report = runtime.block_on(dispatcher.run_part(RunCause::Part, part));
                (report, started.elapsed())
            }));
        }
        Ok(())
    }
}

fn percentile(sorted: &[f64], p: usize) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) * p).div_ceil(100)]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = args();
    let inner = Arc::new(MemoryStore::new());
    // Set-up (made hours ahead in production, uncharged): devices and reservations.
    let lead = chrono::Duration::milliseconds(6_000 + (args.calls as i64) / 15);
    let t0_at = Utc::now() + lead;
    let t0 = DateTime::from_timestamp(t0_at.timestamp() + 1, 0).unwrap();
    let made = Utc::now();
    let mut scheduled = HashMap::with_capacity(args.calls);
    for i in 0..args.calls {
        let device = Device {
            device_id: DeviceId::parse("deviceId", &format!("d{i:07}")).unwrap(),
            voip_token: VoipToken::parse("voipToken", &format!("{i:064x}")).unwrap(),
            environment: PushEnvironment::Production,
            updated_at: made,
        };
        inner.put_device(&device).await.unwrap();
        let at = due(t0, i, args.calls, args.spike);
        let r = Reservation::new(
            device.device_id,
            ScheduledAt::from_stored(at.fixed_offset()),
            Some("Mika".into()),
            made,
        );
        inner
            .create_reservation(&r, made, made - chrono::Duration::minutes(5))
            .await
            .unwrap();
        scheduled.insert(call_key(r.call_id.as_str()), at);
    }
    let ready = Utc::now();
    assert!(
        ready < t0 - chrono::Duration::seconds(4),
        "set-up took too long ({} ms): no time left to select",
        (ready - made).num_milliseconds()
    );

    let model = LimitsModel::new(Limits::default());
    let store = Arc::new(LimitedStore::new(inner.clone(), model));
    let apns = LimitedApns::new(ApnsLimits::default());
    let last = t0 + chrono::Duration::seconds(if args.spike { 60 } else { 1 });
    let mut settings = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    settings.window = (last - Utc::now() + chrono::Duration::seconds(3))
        .to_std()
        .unwrap();
    settings.calls_per_worker = args.calls_per_worker;
    settings.max_workers = 256;
    settings.concurrency = args.calls_per_worker as usize;
    let trigger = Arc::new(ThreadTrigger {
        store: store.clone(),
        apns: apns.clone(),
        settings: settings.clone(),
        runs: Mutex::new(Vec::new()),
    });
    let coordinator = Dispatcher::new(
        store.clone(),
        ThreadTrigger::pool(&apns),
        Arc::new(SystemClock),
        settings,
        "bench",
    )
    .fanning_out(trigger.clone());
    let coordinated = coordinator.coordinate(RunCause::Schedule).await;
    let runs = std::mem::take(&mut *trigger.runs.lock().unwrap());
    let parts = runs.len().max(1);
    let mut reports = vec![coordinated];
    let mut part_seconds = Vec::new();
    for run in runs {
        let (report, took) = run.join().expect("a part does not panic");
        reports.push(report);
        part_seconds.push(took.as_secs_f64());
    }

    // What APNs saw: when each push left, against its call's second.
    let anchor = (tokio::time::Instant::now(), Utc::now());
    let wall = |t: tokio::time::Instant| {
        anchor.1 - chrono::Duration::from_std(anchor.0 - t).unwrap_or_default()
    };
    let mut accepted: HashMap<u64, usize> = HashMap::new();
    let mut lateness = Vec::new();
    let mut early = 0;
    for record in apns.records() {
        if record.answer != Answer::Accepted {
            continue;
        }
        *accepted.entry(record.call).or_default() += 1;
        let at = scheduled[&record.call];
        let late = (wall(record.left) - at).num_microseconds().unwrap() as f64 / 1000.0;
        if late < 0.0 {
            early += 1;
        }
        lateness.push(late);
    }
    lateness.sort_by(f64::total_cmp);
    let duplicates: usize = accepted.values().map(|n| n - 1).sum();
    let missed = args.calls - accepted.len();
    if let Some(path) = &args.csv {
        let mut out = String::from("lateness_ms\n");
        for l in &lateness {
            out.push_str(&format!("{l:.3}\n"));
        }
        std::fs::write(path, out).expect("write the csv");
    }

    let stats = store.model().stats();
    let (wcu, rcu) = stats
        .consumed
        .values()
        .fold((0.0, 0.0), |(w, r), c| (w + c.wcu, r + c.rcu));
    let hottest_write = stats.hottest_write.clone();
    let n = args.calls as f64;
    let handed = f64::from(reports[0].handed_out);
    let gb_s = COORDINATOR_GB * WINDOW_S + PART_GB * WINDOW_S * handed;
    let usd = wcu * USD_PER_WRITE_UNIT
        + rcu * USD_PER_READ_UNIT
        + gb_s * USD_PER_LAMBDA_GB_S
        + (1.0 + f64::from(reports[0].handed_out)) * USD_PER_LAMBDA_REQUEST
        + f64::from(reports[0].handed_out) * USD_PER_EVENT;
    let apns_stats = apns.stats();
    let sent: u32 = reports.iter().map(|r| r.sent).sum();
    let store_errors: u32 = reports.iter().map(|r| r.store_errors).sum();
    let failed: u32 = reports.iter().map(|r| r.failed).sum();
    let lost: u32 = reports.iter().map(|r| r.lost + r.abandoned).sum();
    println!(
        "RESULT calls={} spike={} parts={} sent={} p50_ms={:.1} p99_ms={:.1} max_ms={:.1} \
         early={} duplicates={} missed={} failed={} lost={} throttled={} store_errors={} wcu_per_call={:.2} \
         rcu_per_call={:.2} hottest_write_per_s={:.0} hottest_write_on={} \
         apns_connections={} apns_queued={} lambda_gb_s={:.0} usd_per_1000={:.4} \
         part_wall_s_max={:.1}",
        args.calls,
        args.spike,
        parts,
        sent,
        percentile(&lateness, 50),
        percentile(&lateness, 99),
        lateness.last().copied().unwrap_or(f64::NAN),
        early,
        duplicates,
        missed,
        failed,
        lost,
        stats.throttled(),
        store_errors,
        wcu / n,
        rcu / n,
        hottest_write.as_ref().map_or(0.0, |h| h.units_per_sec),
        hottest_write
            .as_ref()
            .map_or("-".to_owned(), |h| format!("{}:{}", h.target, h.key)
                .replace(' ', "_")),
        apns_stats.connections_used,
        apns_stats.queued,
        gb_s,
        usd / n * 1000.0,
        part_seconds.iter().copied().fold(0.0, f64::max),
    );
}
