//! `bench/dispatch-requests.sh`'s worker: what one dispatch request on a call costs the
//! dispatcher's process, for choosing its timeouts (docs/reliability.md, "Timeouts"). Against DynamoDB
//! Local, through the DynamoDB adapter as deployed (the dispatch client: one attempt, no SDK
//! retries), it makes each call's device read, claim, push mark and outcome, first one call at a
//! time (latency on loopback), then `--concurrency` calls at once (CPU per request under load,
//! and how long a request waits for the process when many are in flight). CPU is this
//! process's own (user + system, from /proc/self/stat), so DynamoDB Local's work is not in it.
//!
//! Prints one `RESULT key=value ...` line.

use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;
use koe::domain::reservation::{Reservation, RunToken};
use koe::store::Outcome;
use koe::store::dynamodb::DynamoStore;
use koe::store::prelude::*;
use koe_bench::percentile;
use koe_testkit::dispatching::reserve_soon;
use koe_testkit::dynamodb;

/// This process's CPU time so far (user + system), in seconds, from /proc/self/stat.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = &stat[stat.rfind(')').expect("a command name") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name and state.
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// One call's four dispatch requests; their latencies in ms.
async fn one_call(store: &DynamoStore, r: &Reservation) -> [f64; 4] {
    let run = RunToken::generate();
    let now = Utc::now();
    let timed = |started: Instant| started.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    store
        .get_device(&r.device_id, now)
        .await
        .expect("device read");
    let read = timed(t);
    let t = Instant::now();
    let abandoned = now - chrono::Duration::seconds(30);
    let won = store
        .claim_reservation(&r.device_id, &r.call_id, &run, now, abandoned)
        .await
        .expect("claim");
    assert!(won, "the claim is won");
    let claim = timed(t);
    let t = Instant::now();
    store
        .mark_push_started(&r.device_id, &r.call_id, &run, now, false)
        .await
        .expect("mark");
    let mark = timed(t);
    let t = Instant::now();
    store
        .finish_reservation(&r.device_id, &r.call_id, Outcome::Sent, &run, now, now)
        .await
        .expect("finish");
    [read, claim, mark, timed(t)]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (mut calls, mut concurrency) = (1_000usize, 64usize);
    while let Some(arg) = args.next() {
        let value = args.next().and_then(|v| v.parse().ok()).expect("a number");
        match arg.as_str() {
            "--calls" => calls = value,
            "--concurrency" => concurrency = value,
            other => panic!("unknown argument {other}"),
        }
    }
    let endpoint = tokio::task::spawn_blocking(dynamodb::endpoint)
        .await
        .unwrap();
    let setup = dynamodb::client().await;
    let tables = dynamodb::create_tables(&setup, &dynamodb::random_prefix()).await;
    let store = Arc::new(DynamoStore::new(
        dynamodb::production_like_client(&endpoint),
        tables,
    ));
    let mut reservations = Vec::new();
    for i in 0..2 * calls {
        let name = format!("bench-{i}-{:08x}", fastrand::u32(..));
        reservations.push(reserve_soon(store.as_ref(), &name, 60_000).await);
    }
    let (one_by_one, crowd) = reservations.split_at(calls);

    // One call at a time: each request's latency on loopback.
    let mut latencies = Vec::new();
    let cpu = cpu_seconds();
    for r in one_by_one {
        latencies.extend(one_call(&store, r).await);
    }
    let sequential_cpu_us = (cpu_seconds() - cpu) * 1e6 / (4 * calls) as f64;
    latencies.sort_by(f64::total_cmp);

    // `concurrency` calls in flight at once on this one thread, as a run's tasks are.
    let cpu = cpu_seconds();
    let started = Instant::now();
    let limit = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    for r in crowd {
        let (store, limit, r) = (store.clone(), limit.clone(), r.clone());
        tasks.spawn(async move {
            let _permit = limit.acquire().await.unwrap();
            one_call(&store, &r).await
        });
    }
    let mut loaded = Vec::new();
    while let Some(done) = tasks.join_next().await {
        loaded.extend(done.unwrap());
    }
    let wall = started.elapsed().as_secs_f64();
    let loaded_cpu_us = (cpu_seconds() - cpu) * 1e6 / (4 * calls) as f64;
    loaded.sort_by(f64::total_cmp);

    println!(
        "RESULT calls={calls} concurrency={concurrency} cpu_us_per_request={sequential_cpu_us:.0} \
         loaded_cpu_us_per_request={loaded_cpu_us:.0} requests_per_s={:.0} \
         p50_ms={:.2} p99_ms={:.2} max_ms={:.2} loaded_p50_ms={:.2} loaded_p99_ms={:.2} loaded_max_ms={:.2}",
        (4 * calls) as f64 / wall,
        percentile(&latencies, 50),
        percentile(&latencies, 99),
        latencies[latencies.len() - 1],
        percentile(&loaded, 50),
        percentile(&loaded, 99),
        loaded[loaded.len() - 1],
    );
}
