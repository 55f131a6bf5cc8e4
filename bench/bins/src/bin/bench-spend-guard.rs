//! What the spend guard writes at the chat API's rate: koe-local (`koe_local::start`) on
//! DynamoDB Local behind the limits proxy, whose model charges the usage table as DynamoDB would
//! with its limits scaled (`KOE_LIMITS_SCALE`, default 0.05: one partition key value takes 50
//! WCU/s, so 100 calls a second stand for 2,000), the scripted stand-in OpenAI answering at once
//! (57 tokens a call). The day's count starts `left` tokens short of the ceiling (half the
//! run's spend; a ceiling the run's spend passes starts empty), so the run goes through it. Prints the usage
//! table's writes a second and per model call, throttles, the busiest partition, the calls
//! refused for a throttled counter, and the tokens served and counted against what was left
//! and the slack.
//!
//! Usage: bench-spend-guard [calls a second, 100] [seconds, 60] [ceiling, 400000000]
//! (bench/spend-guard.sh)

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use koe::App;
use koe::domain::usage_day::UsageDay;
use koe::model::spend_guard::LeasePlan;
use koe::model::spend_guard::lease::shard_counter;
use koe::platform::config::Vars;
use koe::store::UsageStore;
use koe::store::dynamodb::DynamoStore;
use koe_local::LocalConfig;
use koe_testkit::dynamodb::limits::{Limits, LimitsModel, TableDef, Target};
use koe_testkit::dynamodb::limits_proxy::LimitsProxy;
use koe_testkit::openai::{Behaviour, StandInOpenAi};

/// What the stand-in reports a call used (40 + 17).
const USED: u64 = 57;
/// What each request reserves: 1 + 8 + 16 + 375.
const BOUND: u64 = 400;

async fn counted(store: &DynamoStore, day: &UsageDay, plan: LeasePlan) -> u64 {
    let mut total = 0;
    for shard in 0..plan.shards {
        let counter = shard_counter("chat", shard);
        total += store
            .read_tokens(&counter, &day.key)
            .await
            .expect("read a counter");
    }
    total
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rate: u64 = args
        .get(1)
        .map_or(100, |n| n.parse().expect("calls a second"));
    let seconds: u64 = args.get(2).map_or(60, |n| n.parse().expect("seconds"));
    let ceiling: u64 = args
        .get(3)
        .map_or(400_000_000, |n| n.parse().expect("ceiling"));
    if std::env::var("KOE_LIMITS_SCALE").is_err() {
        // SAFETY: set before any thread reads the environment.
        unsafe { std::env::set_var("KOE_LIMITS_SCALE", "0.05") };
    }
    let limits = Limits::from_env();
    let plan = LeasePlan::for_ceiling(ceiling);

    let upstream = tokio::task::spawn_blocking(koe_testkit::dynamodb::endpoint)
        .await
        .unwrap();
    let setup = koe_testkit::dynamodb::client().await;
    let prefix = format!("bench-{}", koe_testkit::dynamodb::random_prefix());
    let tables = koe_testkit::dynamodb::create_tables(&setup, &prefix).await;
    let model = Arc::new(LimitsModel::new(limits));
    let defs = [TableDef::from_template("AgentUsageTable", &tables.usage)];
    let proxy = LimitsProxy::with_model(&upstream, &defs, model).await;
    let direct = DynamoStore::new(setup, tables.clone());
    let through_proxy = DynamoStore::new(
        koe_testkit::dynamodb::production_like_client(&proxy.url()),
        tables.clone(),
    );

    // The day's count `left` tokens short of the ceiling, written past the proxy: about half
    // the run's spend, or none of a ceiling the run's spend passes.
    let day = UsageDay::of(chrono::Utc::now());
    let run = rate * seconds * USED;
    let left = if run > ceiling { ceiling } else { run / 2 };
    for shard in 0..plan.shards {
        let counter = shard_counter("chat", shard);
        let seeded = plan.share - left / u64::from(plan.shards);
        if seeded > 0 {
            direct
                .reserve_tokens(&counter, &day.key, seeded, u64::MAX, day.expire_at())
                .await
                .expect("seed a counter");
        }
    }
    let before = counted(&direct, &day, plan).await;

    let openai = StandInOpenAi::start().await;
    openai.set_default(Behaviour::complete("はい"));
    let ceiling_var = ceiling.to_string();
    let base_url = openai.base_url();
    let vars = Vars::from_pairs(&[
        ("CHAT_ADDR", "127.0.0.1:0"),
        ("AGENT_ADDR", "127.0.0.1:0"),
        ("LOCAL_DISPATCHER", "false"),
        ("DEVICE_HASH_SALT", "bench"),
        ("OPENAI_BASE_URL", &base_url),
        ("OPENAI_API_KEY", "bench"),
        ("AGENT_API_KEYS", koe_testkit::harness::TEST_API_KEY),
        ("AGENT_STEP_KEY", koe_testkit::harness::TEST_STEP_KEY),
        ("CHAT_DAILY_TOKEN_CEILING", &ceiling_var),
    ]);
    let local_config = LocalConfig::from_vars(&vars).expect("bench addresses");
    let app = App::local(vars).with_store(Arc::new(through_proxy));
    let running = koe_local::start(app, &local_config)
        .await
        .expect("koe-local starts");
    let url = format!("http://{}/api/chat", running.chat_addr);
    let body = r#"{"messages":[{"role":"user","content":"hi"}],"maxTokens":375}"#;
    let client = reqwest::Client::new();

    let (answered, refused, busy, other) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    let mut requests = Vec::new();
    for _ in 0..rate * seconds {
        tick.tick().await;
        let (client, url) = (client.clone(), url.clone());
        let counts = (
            answered.clone(),
            refused.clone(),
            busy.clone(),
            other.clone(),
        );
        requests.push(tokio::spawn(async move {
            let response = client
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await;
            let (status, text) = match response {
                Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
                Err(_) => (0, String::new()),
            };
            match status {
                200 => counts.0.fetch_add(1, Ordering::Relaxed),
                503 if text.contains("SPEND_CEILING_REACHED") => {
                    counts.1.fetch_add(1, Ordering::Relaxed)
                }
                // The counter throttled: refused, not let through uncounted.
                503 => counts.2.fetch_add(1, Ordering::Relaxed),
                _ => counts.3.fetch_add(1, Ordering::Relaxed),
            };
        }));
    }
    for request in requests {
        request.await.unwrap();
    }
    let took = started.elapsed().as_secs_f64();
    running.shutdown().await;

    let stats = proxy.stats();
    let usage = Target::base(&tables.usage);
    let writes = stats.consumed.get(&usage).map_or(0.0, |c| c.wcu);
    let calls = answered.load(Ordering::Relaxed);
    let hottest = stats
        .hottest_write
        .as_ref()
        .map_or(0.0, |h| h.units_per_sec);
    let spent = counted(&direct, &day, plan).await - before;
    let slack = plan.slack(BOUND);
    let served = calls * USED;
    println!(
        "limits scaled {:.2} (a partition {:.0} WCU/s); ceiling {ceiling} ({plan:?}); {rate} chat calls/s for {took:.1} s",
        limits.wcu_per_sec / 1000.0,
        limits.wcu_per_sec
    );
    println!(
        "answered {calls}, refused 503 past the ceiling {}, refused 503 for a throttled counter {}, other {}; model calls {}",
        refused.load(Ordering::Relaxed),
        busy.load(Ordering::Relaxed),
        other.load(Ordering::Relaxed),
        openai.request_count()
    );
    println!(
        "usage table: {writes:.0} WCU, {:.2} a second, {:.4} per model call, {:.0} RCU; throttled {} (writes {}, reads {}); busiest partition {hottest:.0} WCU/s (limit {:.0})",
        writes / took,
        writes / calls.max(1) as f64,
        stats.consumed.get(&usage).map_or(0.0, |c| c.rcu),
        stats.throttled(),
        stats
            .throttled_by_operation
            .get("UpdateItem")
            .copied()
            .unwrap_or(0),
        stats
            .throttled_by_operation
            .get("GetItem")
            .copied()
            .unwrap_or(0),
        limits.wcu_per_sec
    );
    println!(
        "tokens served {served} of the {left} left: {:.1} % of it (slack {slack}); counted {spent}{}",
        served as f64 * 100.0 / left as f64,
        if spent >= served {
            ""
        } else {
            " (LESS than served: calls uncounted)"
        }
    );
}
