//! Dispatch precision benchmark (`bench/dispatch-precision.sh` runs it): `--calls` reservations
//! due in one UTC minute, spread evenly over its seconds, sent by koe-local's own dispatcher loop
//! (`koe_local::start`: a run at start-up and one at every UTC minute) on the real
//! clock, with a stand-in APNs that takes `--push-ms` per push.
//!
//! ```sh
//! bench-dispatch --store memory|dynamodb --calls 10000 [--push-ms 20] [--csv lateness.csv]
//! ```
//!
//! `--store dynamodb` uses fresh tables (from `template.yaml`) in the DynamoDB Local that
//! `KOE_TEST_DYNAMODB_ENDPOINT` names. The dispatcher's JSON logs go to stdout, as koe-local's
//! do; the result is one `RESULT key=value ...` line on stderr, and `--csv` gets each push's
//! lateness (milliseconds after its `scheduledAt`, microsecond precision), one per line.
//! Lateness is taken when the push is handed to the push sender, as the APNs request leaves.

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use chrono::{DateTime, Duration, FixedOffset, Utc};
use koe::App;
use koe::domain::device::{Device, DeviceId, PushEnvironment, VoipToken};
use koe::domain::reservation::{Reservation, ReservationStatus, ScheduledAt};
use koe::platform::clock::{Clock, SystemClock};
use koe::platform::config::Vars;
use koe::store::prelude::*;
use koe_local::LocalConfig;
use koe_testkit::push::RecordingPushSender;

/// Store calls in flight while the reservations are made.
const SETUP_CONCURRENCY: usize = 32;
/// The minute must begin at least this long after the setup is expected to end.
const SETUP_MARGIN: i64 = 8;

struct Options {
    store: String,
    calls: usize,
    push: StdDuration,
    csv: Option<String>,
}

const USAGE: &str = "bench-dispatch --store memory|dynamodb --calls N [--push-ms MS] [--csv PATH]";

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        store: "memory".into(),
        calls: 1000,
        push: StdDuration::from_millis(20),
        csv: None,
    };
    for (flag, value) in koe_bench::flag_pairs()? {
        match flag.as_str() {
            "--store" if value == "memory" || value == "dynamodb" => options.store = value,
            "--calls" => options.calls = value.parse().map_err(|_| "--calls: not a number")?,
            "--push-ms" => {
                options.push =
                    StdDuration::from_millis(value.parse().map_err(|_| "--push-ms: not a number")?)
            }
            "--csv" => options.csv = Some(value),
            _ => return Err(format!("bad option {flag} {value}")),
        }
    }
    if options.calls == 0 {
        return Err("--calls must be at least 1".into());
    }
    Ok(options)
}

/// Runs `count` jobs with at most `SETUP_CONCURRENCY` in flight.
async fn for_each_concurrently<F, Fut>(count: usize, job: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(tokio::sync::Semaphore::new(SETUP_CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..count {
        let slot = slots.clone().acquire_owned().await.unwrap();
        let fut = job(i);
        tasks.spawn(async move {
            fut.await;
            drop(slot);
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("setup task");
    }
}

fn device_id(i: usize) -> DeviceId {
    DeviceId::parse("deviceId", &format!("bench-{i}")).unwrap()
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() - 1) as f64 * p / 100.0).ceil() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() -> ExitCode {
    let Some(options) = koe_bench::parsed(parse_args(), "bench-dispatch", Some(USAGE)) else {
        return ExitCode::from(2);
    };
    koe::platform::telemetry::init_local();
    let n = options.calls;

    let store: Arc<dyn Store> = if options.store == "dynamodb" {
        Arc::new(koe_testkit::dynamodb::fresh_store().await)
    } else {
        Arc::new(koe::store::memory::MemoryStore::new())
    };

    // Devices first; their pace tells how long the reservations will take.
    let setup_started = Instant::now();
    let now = Utc::now();
    {
        let store = store.clone();
        for_each_concurrently(n, move |i| {
            let store = store.clone();
            async move {
                let device = Device {
                    device_id: device_id(i),
                    voip_token: VoipToken::parse("voipToken", &format!("{i:064x}")).unwrap(),
                    environment: PushEnvironment::Production,
                    updated_at: now,
                    confirms_calls: false,
                    alert_token: None,
                };
                store.put_device(&device).await.expect("put device");
            }
        })
        .await;
    }
    let devices_took = setup_started.elapsed();

    // The minute: the first whole UTC minute that starts after the reservations are made.
    let expected_ready = Utc::now().timestamp() + (devices_took.as_secs_f64() * 1.5).ceil() as i64;
    let minute_start = (expected_ready + SETUP_MARGIN).div_euclid(60) * 60 + 60;
    let minute = DateTime::from_timestamp(minute_start, 0).unwrap();
    let jst = FixedOffset::east_opt(9 * 3600).unwrap();
    // Call i at second i % 60 of the minute (written in JST, as clients do).
    let scheduled = |i: usize| minute + Duration::seconds((i % 60) as i64);
    let reservations: Arc<Vec<Reservation>> = Arc::new(
        (0..n)
            .map(|i| {
                Reservation::new(
                    device_id(i),
                    ScheduledAt::from_stored(scheduled(i).with_timezone(&jst)),
                    Some("こえ".into()),
                    Utc::now(),
                )
            })
            .collect(),
    );
    {
        let (store, reservations) = (store.clone(), reservations.clone());
        for_each_concurrently(n, move |i| {
            let (store, reservations) = (store.clone(), reservations.clone());
            async move {
                let now = Utc::now();
                store
                    .create_reservation(&reservations[i], now, now - Duration::seconds(150))
                    .await
                    .expect("create reservation");
            }
        })
        .await;
    }
    let setup_took = setup_started.elapsed();
    let ready = Utc::now();
    if ready > minute - Duration::seconds(2) {
        eprintln!(
            "bench-dispatch: setup took {setup_took:?}, too long for the minute chosen ({minute})"
        );
        return ExitCode::FAILURE;
    }
    eprintln!(
        "bench-dispatch: {n} reservations ({}) made in {:.1} s, due in {minute_start}..+60 s ({} s from now)",
        options.store,
        setup_took.as_secs_f64(),
        (minute - ready).num_seconds()
    );

    // koe-local's dispatcher, with the stand-in APNs.
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let push = Arc::new(RecordingPushSender::new(clock.clone()));
    push.set_latency(options.push);
    let vars = Vars::from_pairs(&[
        ("CHAT_ADDR", "127.0.0.1:0"),
        ("AGENT_ADDR", "127.0.0.1:0"),
        ("LOCAL_DISPATCHER", "true"),
        ("DEVICE_HASH_SALT", "bench"),
    ]);
    let local_config = LocalConfig::from_vars(&vars).expect("bench addresses");
    let app = App::local(vars)
        .with_store(store.clone())
        .with_push(push.clone())
        .with_clock(clock.clone());
    let running = koe_local::start(app, &local_config)
        .await
        .expect("koe-local starts");

    // Every push is due by the minute's end; give a duplicate (if any) time to show.
    let until = minute + Duration::seconds(60 + 5);
    loop {
        let now = Utc::now();
        if now >= until {
            break;
        }
        tokio::time::sleep(
            (until - now)
                .to_std()
                .unwrap_or_default()
                .min(StdDuration::from_secs(5)),
        )
        .await;
    }
    drop(running);

    // Lateness, duplicates and misses from what the stand-in APNs saw, statuses from the store.
    let due: HashMap<&str, DateTime<Utc>> = reservations
        .iter()
        .map(|r| (r.call_id.as_str(), r.scheduled_at.utc()))
        .collect();
    let mut pushes: HashMap<String, u32> = HashMap::new();
    let mut lateness = Vec::with_capacity(n);
    let mut early = 0;
    for p in push.sent() {
        let count = pushes.entry(p.call_id.clone()).or_default();
        *count += 1;
        if *count > 1 {
            continue;
        }
        let Some(at) = due.get(p.call_id.as_str()) else {
            continue;
        };
        let late_ms = (p.at - *at).num_microseconds().unwrap() as f64 / 1000.0;
        if late_ms < 0.0 {
            early += 1;
        }
        lateness.push(late_ms);
    }
    let duplicates: u32 = pushes.values().map(|c| c - 1).sum();
    let misses = reservations
        .iter()
        .filter(|r| !pushes.contains_key(r.call_id.as_str()))
        .count();
    let not_sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    {
        let (store, reservations, not_sent) =
            (store.clone(), reservations.clone(), not_sent.clone());
        for_each_concurrently(n, move |i| {
            let (store, reservations, not_sent) =
                (store.clone(), reservations.clone(), not_sent.clone());
            async move {
                let r = &reservations[i];
                let stored = store
                    .get_reservation(&r.device_id, Utc::now())
                    .await
                    .expect("read back");
                if stored.is_none_or(|s| s.status != ReservationStatus::Sent) {
                    not_sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        })
        .await;
    }

    if let Some(path) = &options.csv {
        let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("csv file"));
        writeln!(file, "lateness_ms").unwrap();
        for l in &lateness {
            writeln!(file, "{l:.3}").unwrap();
        }
    }
    let mut sorted = lateness.clone();
    sorted.sort_by(f64::total_cmp);
    eprintln!(
        "RESULT store={} calls={n} push_ms={} sent={} p50_ms={:.1} p99_ms={:.1} max_ms={:.1} early={early} duplicates={duplicates} misses={misses} not_sent_in_store={} setup_s={:.1} peak_rss_mib={:.1}",
        options.store,
        options.push.as_millis(),
        lateness.len(),
        percentile(&sorted, 50.0),
        percentile(&sorted, 99.0),
        sorted.last().copied().unwrap_or(f64::NAN),
        not_sent.load(std::sync::atomic::Ordering::Relaxed),
        setup_took.as_secs_f64(),
        peak_rss_kib() as f64 / 1024.0,
    );
    ExitCode::SUCCESS
}
