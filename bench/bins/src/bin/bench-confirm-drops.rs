//! `bench/confirm-drops.sh`'s worker: N calls due in one second, through one dispatcher run on the
//! limits models (the embedded store behind DynamoDB's per-partition limits, which counts the
//! units each request consumes; the stand-in APNs, which answers every push 200 after
//! 120 ± 30 ms), to simulated phones that silently drop a share of the pushes (APNs took them,
//! the phone never rang) and, when their device registered with `confirmsCalls`, confirm each
//! push they get 100 to 300 ms after it was answered, through the store's `confirm_call` as
//! `POST /calls/confirm` makes it (asked again 100 ms later while a push of the call is leaving).
//!
//! ```sh
//! bench-confirm-drops --calls 1000 --drop 0.1 [--confirms] [--seed 7]
//! ```
//!
//! Prints one `RESULT key=value ...` line: the share of calls that rang on the phone within
//! 15 s of their second, the share the backend knows rang (`rang` recorded within 15 s), the
//! final statuses, pushes per call, the confirmation latency from the reserved second (p50,
//! p99), and the DynamoDB units per call (write and read) the dispatcher and the confirmations
//! consumed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use koe::dispatch::{Dispatcher, RunCause};
use koe::domain::device::{Device, DeviceId};
use koe::domain::reservation::{CallId, ReservationStatus};
use koe::platform::clock::SystemClock;
use koe::platform::config::{Config, DispatchConfig, Vars};
use koe::push::pool::{PoolSettings, PushPool};
use koe::push::{PushError, PushSender, VoipPush};
use koe::store::ConfirmAnswer;
use koe::store::memory::MemoryStore;
use koe::store::prelude::*;
use koe_bench::{percentile, seed_call};
use koe_testkit::dynamodb::limited_store::LimitedStore;
use koe_testkit::dynamodb::limits::{Limits, LimitsModel};
use koe_testkit::push::limited::{ApnsLimits, LimitedApns, call_key};

/// Calls that rang (or were confirmed) this long after their second count.
const WITHIN: chrono::Duration = chrono::Duration::seconds(15);

struct Args {
    calls: usize,
    drop: f64,
    confirms: bool,
    seed: u64,
}

fn args() -> Args {
    let mut args = Args {
        calls: 1000,
        drop: 0.1,
        confirms: false,
        seed: 7,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--calls" => args.calls = value().parse().expect("--calls N"),
            "--drop" => args.drop = value().parse().expect("--drop F (0 to 1)"),
            "--seed" => args.seed = value().parse().expect("--seed N"),
            "--confirms" => args.confirms = true,
            other => panic!("unknown argument {other}"),
        }
    }
    args
}

/// A uniform draw in `[0, 1)` from a key (splitmix64), so every run with one seed drops the same
/// pushes.
fn draw(key: u64) -> f64 {
    let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as f64 / (u64::MAX as f64 + 1.0)
}

/// What the phones saw, per call.
#[derive(Default)]
struct Seen {
    /// Pushes APNs accepted for the call (attempts).
    pushes: u32,
    /// When the first push that reached the phone was answered (the phone rang).
    rang: Option<DateTime<Utc>>,
    /// When the backend stored the call's confirmation.
    confirmed: Option<DateTime<Utc>>,
}

/// APNs's stand-in, then the phone: a push APNs accepted reaches the phone unless the draw drops
/// it; a phone whose device confirms its calls confirms each push it gets.
struct Phones {
    apns: Arc<dyn PushSender>,
    store: Arc<dyn Store>,
    drop: f64,
    confirms: bool,
    seed: u64,
    seen: Arc<Mutex<HashMap<String, Seen>>>,
}

#[async_trait]
impl PushSender for Phones {
    async fn send(&self, push: &VoipPush, device: &Device) -> Result<(), PushError> {
        self.apns.send(push, device).await?;
        let now = Utc::now();
        let key = call_key(&push.call_id) ^ (u64::from(push.attempt) << 56) ^ self.seed;
        let reached = draw(key) >= self.drop;
        {
            let mut seen = self.seen.lock().unwrap();
            let call = seen.entry(push.call_id.clone()).or_default();
            call.pushes += 1;
            if reached && call.rang.is_none() {
                call.rang = Some(now);
            }
        }
        if reached && self.confirms {
            let pause = Duration::from_millis(100 + (draw(key ^ 0x5555) * 200.0) as u64);
            let (store, seen) = (self.store.clone(), self.seen.clone());
            let (device_id, call_id) = (
                device.device_id.clone(),
                CallId::from_stored(push.call_id.clone()),
            );
            tokio::spawn(async move {
                tokio::time::sleep(pause).await;
                confirm(&*store, &device_id, &call_id, &seen).await;
            });
        }
        Ok(())
    }

    async fn warm(&self) {
        self.apns.warm().await;
    }

    async fn prepare(&self, expected_in_second: usize) {
        self.apns.prepare(expected_in_second).await;
    }
}

/// `POST /calls/confirm` as the API makes it: asked again while a push of the call is leaving,
/// for at most 2 s, then (as an app would after a 503) once a second for up to 10 s.
async fn confirm(
    store: &dyn Store,
    device_id: &DeviceId,
    call_id: &CallId,
    seen: &Mutex<HashMap<String, Seen>>,
) {
    for _ in 0..30 {
        let now = Utc::now();
        match store.confirm_call(device_id, call_id, now).await {
            Ok(ConfirmAnswer::Rang(r)) => {
                let mut seen = seen.lock().unwrap();
                let call = seen.entry(call_id.as_str().to_owned()).or_default();
                if call.confirmed.is_none() {
                    call.confirmed = r.rang_at;
                }
                return;
            }
            Ok(ConfirmAnswer::NotFound) => return,
            Ok(ConfirmAnswer::PushInFlight) | Err(_) => {
                tokio::time::sleep(Duration::from_millis(300)).await
            }
        }
    }
}

/// The reservations, due over the second from `t0`; the second each call is due, by callId.
async fn seed(
    store: &MemoryStore,
    args: &Args,
    t0: DateTime<Utc>,
) -> HashMap<String, (DeviceId, DateTime<Utc>)> {
    let made = t0 - chrono::Duration::hours(1);
    let mut due = HashMap::with_capacity(args.calls);
    for i in 0..args.calls {
        let at = t0 + chrono::Duration::milliseconds((i as i64 * 1000) / args.calls as i64);
        let r = seed_call(store, i, at, made, args.confirms).await;
        due.insert(r.call_id.as_str().to_owned(), (r.device_id, at));
    }
    due
}

fn settings(t0: DateTime<Utc>) -> DispatchConfig {
    let mut settings = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    // Past the last call's third push and its wait: every call ends within the run.
    let end = t0 + chrono::Duration::seconds(1) + WITHIN + chrono::Duration::seconds(5);
    settings.window = (end - Utc::now()).to_std().expect("the window is ahead");
    settings
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = args();
    let t0 = DateTime::from_timestamp(Utc::now().timestamp() + 8, 0).unwrap();
    let inner = Arc::new(MemoryStore::new());
    let due = seed(&inner, &args, t0).await;
    let store = Arc::new(LimitedStore::new(
        inner.clone(),
        LimitsModel::new(Limits::from_env()),
    ));
    let apns = LimitedApns::new(ApnsLimits::default());
    let connection = {
        let apns = apns.clone();
        Arc::new(PushPool::new(
            Arc::new(move || apns.connection()),
            PoolSettings::default(),
        ))
    };
    let seen = Arc::new(Mutex::new(HashMap::new()));
    let phones = Arc::new(Phones {
        apns: connection,
        store: store.clone(),
        drop: args.drop,
        confirms: args.confirms,
        seed: args.seed,
        seen: seen.clone(),
    });
    let dispatcher = Dispatcher::new(
        store.clone(),
        phones,
        Arc::new(SystemClock),
        settings(t0),
        "bench",
    );
    let report = dispatcher.run(RunCause::Schedule).await;
    // Confirmations still being asked.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let seen = std::mem::take(&mut *seen.lock().unwrap());
    let now = Utc::now();
    let mut statuses: HashMap<&'static str, usize> = HashMap::new();
    let (mut rang_in_time, mut known_in_time, mut pushes) = (0, 0, 0u64);
    let mut latency = Vec::new();
    for (call_id, (device_id, at)) in &due {
        let record = inner.get_reservation(device_id, now).await.unwrap();
        let status = record.as_ref().map_or("none", |r| r.status.as_str());
        *statuses.entry(status).or_default() += 1;
        if let Some(r) = record
            .as_ref()
            .filter(|r| r.status == ReservationStatus::Rang)
        {
            let confirmed = r.rang_at.expect("a rang call has rangAt");
            latency.push((confirmed - *at).num_milliseconds() as f64);
            known_in_time += usize::from(confirmed - *at <= WITHIN);
        }
        if let Some(call) = seen.get(call_id) {
            pushes += u64::from(call.pushes);
            rang_in_time += usize::from(call.rang.is_some_and(|t| t - *at <= WITHIN));
        }
    }
    latency.sort_by(f64::total_cmp);
    let stats = store.model().stats();
    let (wcu, rcu) = stats
        .consumed
        .values()
        .fold((0.0, 0.0), |(w, r), c| (w + c.wcu, r + c.rcu));
    let n = args.calls as f64;
    let count = |s: &str| statuses.get(s).copied().unwrap_or(0);
    println!(
        "RESULT calls={} drop={} confirms={} rang_15s={:.4} known_rang_15s={:.4} rang={} \
         unconfirmed={} sent={} failed={} missed={} pushes_per_call={:.3} confirm_p50_ms={:.0} \
         confirm_p99_ms={:.0} wcu_per_call={:.2} rcu_per_call={:.2} throttled={} run_sent={}",
        args.calls,
        args.drop,
        args.confirms,
        rang_in_time as f64 / n,
        known_in_time as f64 / n,
        count("rang"),
        count("unconfirmed"),
        count("sent"),
        count("failed"),
        count("missed"),
        pushes as f64 / n,
        percentile(&latency, 50),
        percentile(&latency, 99),
        wcu / n,
        rcu / n,
        stats.throttled(),
        report.sent,
    );
}
