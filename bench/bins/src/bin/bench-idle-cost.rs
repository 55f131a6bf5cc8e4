//! What the dispatcher costs when idle and per call: the built `dispatch` binary under the
//! Lambda Runtime API stand-in, on DynamoDB Local behind the limits proxy (which charges each
//! request's units as DynamoDB would), with the stand-in Secrets Manager and EventBridge.
//!
//! Usage: bench-idle-cost <path of the built dispatch binary> [idle runs] [calls]
//! (bench/idle-cost.sh builds the release binary and calls this). It prints the measured
//! figures as a table and, last, one JSON line (`bench/monthly-cost.py` reads it).

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use koe::dispatch::wake::{Wake, wake_for};
use koe::store::dynamodb::DynamoStore;
use koe::store::prelude::*;
use koe_testkit::dispatching::CountingTrigger;
use koe_testkit::dynamodb::limits::{Limits, LimitsModel, Stats};
use koe_testkit::dynamodb::limits_proxy::LimitsProxy;
use koe_testkit::eventbridge::StandInEventBridge;
use koe_testkit::fixtures::{committed, env_json};
use koe_testkit::runtime_api::{Outcome, RuntimeApi};
use koe_testkit::secretsmanager::StandInSecretsManager;
use serde_json::{Value, json};

/// The deployed dispatch function's memory (template.yaml, `DispatchFunction`).
const MEMORY_GB: f64 = 0.25;
/// Minutes in a month of 730 hours (AWS's billing month).
const MINUTES_A_MONTH: f64 = 730.0 * 60.0;

fn units(stats: &Stats) -> (f64, f64) {
    stats
        .consumed
        .values()
        .fold((0.0, 0.0), |(w, r), c| (w + c.wcu, r + c.rcu))
}

/// Makes a reservation for `device` due at `due` through the store as POST /calls does, and
/// the units (WRU, RRU) the proxy charged for it.
async fn create_measured(
    store: &DynamoStore,
    proxy: &LimitsProxy,
    device: koe::domain::device::DeviceId,
    due: DateTime<Utc>,
    now: DateTime<Utc>,
) -> (koe::domain::reservation::Reservation, (f64, f64)) {
    let r = koe::domain::reservation::Reservation::new(
        device,
        koe::domain::reservation::ScheduledAt::from_stored(due.fixed_offset()),
        None,
        now,
    );
    let before = units(&proxy.stats());
    store
        .create_reservation(&r, now, now - chrono::Duration::minutes(5))
        .await
        .unwrap();
    let after = units(&proxy.stats());
    (r, (after.0 - before.0, after.1 - before.1))
}

fn percentile(sorted: &[f64], p: usize) -> f64 {
    sorted[(sorted.len() - 1) * p / 100]
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let binary = args
        .get(1)
        .expect("usage: bench-idle-cost <dispatch binary> [idle runs] [calls]");
    let idle_runs: usize = args.get(2).map_or(30, |n| n.parse().expect("idle runs"));
    let calls: usize = args.get(3).map_or(50, |n| n.parse().expect("calls"));

    let env_json = env_json();
    let params = &env_json["Parameters"];
    let upstream = tokio::task::spawn_blocking(koe_testkit::dynamodb::endpoint)
        .await
        .unwrap();
    // Tables under the binary's credentials and region (DynamoDB Local keeps them apart).
    let client_at = |endpoint: &str| {
        aws_sdk_dynamodb::Client::from_conf(
            koe_testkit::dynamodb::env_json_config_builder(endpoint)
                .timeout_config(DynamoStore::timeouts())
                .build(),
        )
    };
    let setup = client_at(&upstream);
    let prefix = format!("bench-{}", koe_testkit::dynamodb::random_prefix());
    let tables = koe_testkit::dynamodb::create_tables(&setup, &prefix).await;
    let model = Arc::new(LimitsModel::new(Limits::from_env()));
    let proxy = LimitsProxy::over_tables(&upstream, &tables, model).await;
    let secrets = StandInSecretsManager::start_with_fixture_secrets("127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind the stand-in Secrets Manager");
    let eventbridge = StandInEventBridge::start().await;
    let api = RuntimeApi::start().await;

    let mut env = params.clone();
    env.extend(env_json["DispatchFunction"].clone());
    for (key, value) in [
        ("AWS_ENDPOINT_URL_DYNAMODB", proxy.url()),
        ("AWS_ENDPOINT_URL_SECRETS_MANAGER", secrets.endpoint()),
        ("AWS_ENDPOINT_URL_EVENTBRIDGE", eventbridge.endpoint()),
        ("DEVICES_TABLE", tables.devices.clone()),
        ("CALLS_TABLE", tables.calls.clone()),
        ("RUST_LOG", "warn".into()),
        ("METRICS", "off".into()),
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("AWS_LAMBDA_RUNTIME_API", api.address()),
        ("AWS_LAMBDA_FUNCTION_NAME", "koe-bench-dispatch".into()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".into()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256".into()),
        (
            "AWS_LAMBDA_LOG_GROUP_NAME",
            "/aws/lambda/koe-bench-dispatch".into(),
        ),
        ("AWS_LAMBDA_LOG_STREAM_NAME", "2026/01/01/[$LATEST]0".into()),
        ("AWS_LAMBDA_INITIALIZATION_TYPE", "on-demand".into()),
    ] {
        env.insert(key.into(), value);
    }
    let mut child = std::process::Command::new(binary)
        .env_clear()
        .envs(&env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("start {binary}: {e}"));
    let schedule = serde_json::to_vec(&committed("dispatch-schedule")).unwrap();
    let invoke = async |within: Duration| -> (Value, Duration) {
        let started = Instant::now();
        match api.invoke(schedule.clone(), within).await {
            outcome @ Outcome::Response { .. } => (outcome.response_json(), started.elapsed()),
            other => panic!("the dispatch binary answered {other:?}"),
        }
    };

    // The cold start, then warm idle minutes, as the schedule invokes the function.
    let (_, cold) = invoke(Duration::from_secs(30)).await;
    let before = units(&proxy.stats());
    let mut idle_ms = Vec::new();
    for _ in 0..idle_runs {
        let (summary, took) = invoke(Duration::from_secs(30)).await;
        assert_eq!(summary["claimed"], 0, "idle: {summary}");
        idle_ms.push(took.as_secs_f64() * 1000.0);
    }
    let after = units(&proxy.stats());
    let idle_rru = (after.1 - before.1) / idle_runs as f64;
    let idle_wru = (after.0 - before.0) / idle_runs as f64;
    idle_ms.sort_by(f64::total_cmp);
    let idle_p50 = percentile(&idle_ms, 50);
    let idle_gbs = MEMORY_GB * idle_p50.ceil() / 1000.0;

    // A minute with calls: `calls` reservations due 10 to 20 s ahead, made through the store
    // the way POST /calls makes them (device record first, not counted as the call's).
    let store = DynamoStore::new(client_at(&proxy.url()), tables.clone());
    let now = Utc::now();
    let mut made = Vec::new();
    let mut device_units = (0.0, 0.0);
    let mut create_units = (0.0, 0.0);
    for i in 0..calls {
        let device = koe::domain::device::Device {
            device_id: koe::domain::device::DeviceId::parse("deviceId", &format!("bench-{i}"))
                .unwrap(),
            voip_token: koe::domain::device::VoipToken::parse("voipToken", &"ab".repeat(32))
                .unwrap(),
            environment: koe::domain::device::PushEnvironment::Sandbox,
            updated_at: now,
            confirms_calls: false,
            alert_token: None,
        };
        let b = units(&proxy.stats());
        store.put_device(&device).await.unwrap();
        let m = units(&proxy.stats());
        let due: DateTime<Utc> =
            now + chrono::Duration::milliseconds(10_000 + (i as i64 * 10_000) / calls as i64);
        let (r, (w, rr)) = create_measured(&store, &proxy, device.device_id, due, now).await;
        device_units = (device_units.0 + m.0 - b.0, device_units.1 + m.1 - b.1);
        create_units = (create_units.0 + w, create_units.1 + rr);
        made.push(r);
    }
    // A minute's only call: one reservation in each of `calls` minutes hours ahead (no run
    // selects them here), so each create finds its minute without a count.
    let mut lone_units = (0.0, 0.0);
    let mut lone = Vec::new();
    for i in 0..calls {
        let due = now + chrono::Duration::hours(2) + chrono::Duration::minutes(i as i64);
        let device =
            koe::domain::device::DeviceId::parse("deviceId", &format!("bench-lone-{i}")).unwrap();
        let (r, (w, rr)) = create_measured(&store, &proxy, device, due, now).await;
        lone_units = (lone_units.0 + w, lone_units.1 + rr);
        lone.push(r);
    }
    // DELETE /calls' store request on each of them (the device secret's read is apart): the
    // record's read, then the cancel and its tombstone in one transaction.
    let before_cancels = units(&proxy.stats());
    for r in &lone {
        let missed_before = now - chrono::Duration::minutes(2);
        store
            .cancel_reservation(&r.device_id, None, now, missed_before)
            .await
            .unwrap();
    }
    let after_cancels = units(&proxy.stats());
    let before_run = units(&proxy.stats());
    let (summary, busy) = invoke(Duration::from_secs(100)).await;
    let after_run = units(&proxy.stats());
    assert_eq!(
        summary["sent"], calls as u64,
        "every call pushed: {summary}"
    );
    let per_call = |(w, r): (f64, f64)| (w / calls as f64, r / calls as f64);
    let create = per_call(create_units);
    let lone = per_call(lone_units);
    let cancel = per_call((
        after_cancels.0 - before_cancels.0,
        after_cancels.1 - before_cancels.1,
    ));
    let dispatch = per_call((after_run.0 - before_run.0, after_run.1 - before_run.1));
    let busy_gbs = MEMORY_GB * busy.as_secs_f64();

    // A run that stays (a call 50 s ahead), and creates made meanwhile for seconds before it:
    // they find its watch (their claim of a wake refused: 1 WRU) and wake nothing (those due
    // after the gap the schedule leaves need no wake at all: 0 WRU).
    let bus = CountingTrigger::default();
    koe_testkit::dispatching::reserve_soon(&store, "bench-anchor", 50_000).await;
    let run = invoke(Duration::from_secs(100));
    let creates = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let mut wakes = Vec::new();
        for (i, ahead) in [15_000, 25_000, 35_000].into_iter().enumerate() {
            let name = format!("bench-soon-{i}");
            let r = koe_testkit::dispatching::reserve_soon(&store, &name, ahead).await;
            let b = units(&proxy.stats());
            let wake = wake_for(&store, &bus, &r.call_id, Utc::now(), r.due_at).await;
            let a = units(&proxy.stats());
            wakes.push((ahead, wake, a.0 - b.0));
        }
        wakes
    };
    let ((stayed, _), wakes) = tokio::join!(run, creates);
    child.kill().unwrap();
    child.wait().unwrap();

    println!("The dispatch binary ({binary}), 256 MB, on DynamoDB Local behind the limits proxy");
    println!();
    println!("| measured | value |");
    println!("| --- | ---: |");
    println!(
        "| cold start (process start to answer) | {:.0} ms |",
        cold.as_secs_f64() * 1000.0
    );
    println!(
        "| idle run, warm: p50 / p90 / max of {idle_runs} | {:.1} / {:.1} / {:.1} ms |",
        idle_p50,
        percentile(&idle_ms, 90),
        idle_ms[idle_ms.len() - 1]
    );
    println!("| billed GB-s per idle minute | {idle_gbs:.5} |");
    println!(
        "| billed GB-s per idle month (43,800 runs) | {:.0} |",
        idle_gbs * MINUTES_A_MONTH
    );
    println!("| DynamoDB per idle run: RRU / WRU | {idle_rru:.2} / {idle_wru:.2} |");
    println!(
        "| a minute with {calls} calls due 10-20 s ahead: run | {:.1} s, {busy_gbs:.2} GB-s |",
        busy.as_secs_f64()
    );
    println!(
        "| per call, create: WRU / RRU | {:.2} / {:.2} |",
        create.0, create.1
    );
    println!(
        "| per call, create of a minute's only call ({calls} minutes): WRU / RRU | {:.2} / {:.2} |",
        lone.0, lone.1
    );
    println!(
        "| a cancel of a scheduled call (DELETE /calls' store request): WRU / RRU | {:.2} / {:.2} |",
        cancel.0, cancel.1
    );
    println!(
        "| per call, dispatch (with its run's selection and watch): WRU / RRU | {:.2} / {:.2} |",
        dispatch.0, dispatch.1
    );
    println!(
        "| device registration (once per device, not per call): WRU / RRU | {:.2} / {:.2} |",
        device_units.0 / calls as f64,
        device_units.1 / calls as f64
    );
    println!(
        "| a run staying for a call 40 s ahead | {} sent, {:.1} s |",
        stayed["sent"],
        stayed["durationMs"].as_f64().unwrap_or_default() / 1000.0
    );
    for (ahead, wake, wru) in &wakes {
        println!(
            "| create {:.0} s ahead while it stays: wake | {wake:?}, {wru:.1} WRU |",
            *ahead as f64 / 1000.0
        );
    }
    let woken = bus.count();
    assert!(
        wakes
            .iter()
            .all(|(_, w, _)| matches!(w, Wake::Watched | Wake::NotNeeded))
            && woken == 0,
        "the staying run's watch spares the wakes before its last call: {wakes:?}"
    );
    assert_eq!(
        stayed["sent"], 4,
        "the staying run sent the watched calls: {stayed}"
    );
    println!(
        "{}",
        json!({
            "idleMsP50": idle_p50,
            "idleGbSeconds": idle_gbs,
            "idleRru": idle_rru,
            "idleWru": idle_wru,
            "createWru": create.0,
            "createRru": create.1,
            "loneCreateWru": lone.0,
            "loneCreateRru": lone.1,
            "dispatchWru": dispatch.0,
            "dispatchRru": dispatch.1,
            "woken": woken,
            "calls": calls,
            "busySeconds": busy.as_secs_f64(),
            "env": BTreeMap::from([("memoryGb", MEMORY_GB)]),
        })
    );
}
