//! APNs pool benchmark (`bench/apns-pool.sh` runs it): `--pushes` pushes all due at one instant,
//! sent against the stand-in APNs with production's limits (`koe_testkit::push::limited`,
//! default limits: 1,000 streams per connection, 120 ± 30 ms, 150 ms handshake) through
//!
//! - `one`: one connection, already open (a warm container's single a2 client, before the pool);
//! - `prepared`: a `PushPool` (default settings: 8 connections, 900 streams each) after
//!   `prepare(pushes)` ahead of the instant;
//! - `cold`: the same pool, not prepared (connections open as the pushes arrive).
//!
//! ```sh
//! bench-apns-pool [--pushes 10000] [--cases one,prepared,cold]
//! ```
//!
//! Prints one `RESULT key=value ...` line per case on stdout: lateness after the due instant of
//! leaving (the push had an open connection and a stream) and of being answered (p50, p99, max,
//! in ms), how many were answered within the second, connections used, the most pushes in
//! flight on one connection, how many waited for a stream inside the stand-in (as the HTTP/2
//! client would queue them) and in the pool, and how many handshakes pushes had to wait for.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use koe::push::PushSender;
use koe::push::pool::{PoolSettings, PushPool};
use koe_testkit::push::limited::{ApnsLimits, LimitedApns};
use koe_testkit::push::push_and_device;
use tokio::time::Instant;

/// Time between the last task spawned and the due instant, so every push is waiting for it.
const SETUP_MARGIN: Duration = Duration::from_millis(300);

const CASES: [&str; 3] = ["one", "prepared", "cold"];

struct Options {
    pushes: usize,
    cases: Vec<String>,
}

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        pushes: 10_000,
        cases: CASES.iter().map(|c| (*c).to_owned()).collect(),
    };
    for (flag, value) in koe_bench::flag_pairs()? {
        match flag.as_str() {
            "--pushes" => options.pushes = value.parse().map_err(|_| "--pushes: not a number")?,
            "--cases" => {
                options.cases = value.split(',').map(str::to_owned).collect();
                if let Some(bad) = options.cases.iter().find(|c| !CASES.contains(&c.as_str())) {
                    return Err(format!("--cases: unknown case {bad}"));
                }
            }
            _ => return Err(format!("bad option {flag} {value}")),
        }
    }
    if options.pushes == 0 {
        return Err("--pushes must be at least 1".into());
    }
    Ok(options)
}

/// p-th percentile (nearest rank) of sorted milliseconds.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn run_case(case: &str, pushes: usize) -> String {
    let apns = LimitedApns::new(ApnsLimits::default());
    let mut pool = None;
    let sender: Arc<dyn PushSender> = match case {
        "one" => {
            let connection = apns.connection();
            connection.warm().await;
            connection
        }
        _ => {
            let factory = {
                let apns = apns.clone();
                Arc::new(move || apns.connection())
            };
            let prepared = Arc::new(PushPool::new(factory, PoolSettings::default()));
            if case == "prepared" {
                prepared.prepare(pushes).await;
            }
            pool = Some(prepared.clone());
            prepared
        }
    };

    let (push, device) = push_and_device("bench", "bench-device");
    let (push, device) = (Arc::new(push), Arc::new(device));
    let due = Instant::now() + SETUP_MARGIN;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..pushes {
        let (sender, push, device) = (sender.clone(), push.clone(), device.clone());
        tasks.spawn(async move {
            tokio::time::sleep_until(due).await;
            sender.send(&push, &device).await
        });
    }
    assert!(
        Instant::now() < due,
        "setting up took longer than the margin"
    );
    let results = tasks.join_all().await;
    let failed = results.iter().filter(|r| r.is_err()).count();

    let records = apns.records();
    let millis = |at: Instant| at.saturating_duration_since(due).as_secs_f64() * 1000.0;
    let mut left: Vec<f64> = records.iter().map(|r| millis(r.left)).collect();
    let mut answered: Vec<f64> = records.iter().map(|r| millis(r.answered)).collect();
    left.sort_by(f64::total_cmp);
    answered.sort_by(f64::total_cmp);
    let within_second = answered.iter().filter(|ms| **ms <= 1000.0).count();
    let stats = apns.stats();
    let waited_in_pool = pool.map_or(0, |pool| pool.pushes_waited());
    format!(
        "case={case} pushes={pushes} left_p50_ms={:.0} left_p99_ms={:.0} left_max_ms={:.0} \
         answered_p50_ms={:.0} answered_p99_ms={:.0} answered_max_ms={:.0} \
         answered_within_1s={within_second} connections={} max_in_flight_per_connection={} \
         queued_apns={} queued_pool={waited_in_pool} cold_connects={} failed={failed}",
        percentile(&left, 50.0),
        percentile(&left, 99.0),
        percentile(&left, 100.0),
        percentile(&answered, 50.0),
        percentile(&answered, 99.0),
        percentile(&answered, 100.0),
        stats.connections_used,
        stats.max_in_flight_per_connection,
        stats.queued,
        stats.cold_connects,
    )
}

#[tokio::main]
async fn main() -> ExitCode {
    let Some(options) = koe_bench::parsed(parse_args(), "bench-apns-pool", None) else {
        return ExitCode::from(2);
    };
    for case in &options.cases {
        println!("RESULT {}", run_case(case, options.pushes).await);
    }
    ExitCode::SUCCESS
}
