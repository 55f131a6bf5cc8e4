//! The spend guard at the API's rate (docs/spend-guard.md, "At scale"): under a large ceiling
//! each guard (a container) leases blocks of tokens from sharded counters, so no item takes a
//! write per model call, and the ceiling still holds within the stated slack.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use koe::domain::chat::{ChatMessage, Role};
use koe::domain::usage_day::UsageDay;
use koe::model::spend_guard::lease::{LEASE_CEILING, SHARDS, shard_counter};
use koe::model::spend_guard::{SpendApi, SpendGuard, token_bound};
use koe::model::{ModelRequest, ProviderError};
use koe::store::memory::MemoryStore;
use koe::store::{SpendOutcome, StoreError, UsageRequest, UsageStore};
use koe_testkit::clock::ManualClock;
use koe_testkit::dynamodb::limits::{Capacity, Charge, Limits, LimitsModel, Target};

const NOW: &str = "2035-03-01T03:00:00Z";

fn day() -> UsageDay {
    UsageDay::of(NOW.parse::<DateTime<Utc>>().unwrap())
}

/// A chat request that reserves about `max_tokens` + 25 tokens.
fn request(content: &str, max_tokens: u32) -> ModelRequest {
    ModelRequest {
        model: "gpt-4o-mini".into(),
        messages: vec![ChatMessage {
            role: Role::User,
            content: content.to_owned(),
        }],
        max_tokens,
        response_format: None,
    }
}

/// The day's chat count over every shard.
async fn counted(store: &dyn UsageStore) -> u64 {
    counted_on(store, &day()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_ceiling_holds_under_64_concurrent_callers_racing_past_it() {
    race_past_the_ceiling(Arc::new(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_ceiling_holds_under_64_concurrent_callers_racing_past_it_on_dynamodb() {
    race_past_the_ceiling(Arc::new(koe_testkit::dynamodb::fresh_store().await)).await;
}

/// 64 containers race past the ceiling, each calling until it is refused: the count reaches
/// the ceiling, passes it by at most one block a shard, and what was spent is what is counted
/// once the blocks are returned.
async fn race_past_the_ceiling(store: Arc<dyn UsageStore>) {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let ceiling = LEASE_CEILING;
    let request = request(&"あ".repeat(40_000), 4_096);
    let bound = token_bound(&request);
    let used = bound * 3 / 4;
    let guards: Vec<Arc<SpendGuard>> = (0..64)
        .map(|_| {
            Arc::new(SpendGuard::new(
                store.clone(),
                clock.clone(),
                SpendApi::Chat,
                ceiling,
            ))
        })
        .collect();
    let plan = guards[0].plan();
    assert!(plan.leasing(), "{plan:?}");
    let spent = Arc::new(AtomicU64::new(0));
    let notices = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = guards
        .iter()
        .map(|guard| {
            let (guard, request) = (guard.clone(), request.clone());
            let (spent, notices) = (spent.clone(), notices.clone());
            tokio::spawn(async move {
                loop {
                    match guard.reserve(&request).await {
                        Ok(Some(reserved)) => {
                            tokio::task::yield_now().await;
                            spent.fetch_add(used, Ordering::Relaxed);
                            guard.settle(&reserved, used).await;
                        }
                        Ok(None) => panic!("the counter failed"),
                        Err(ProviderError::CeilingReached { notify, .. }) => {
                            notices.fetch_add(u64::from(notify), Ordering::Relaxed);
                            break;
                        }
                        Err(e) => panic!("{e:?}"),
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let spent = spent.load(Ordering::Relaxed);
    let count = counted(store.as_ref()).await;
    println!(
        "ceiling {ceiling}, slack {}, counted {count}, spent {spent}",
        plan.slack(bound)
    );
    assert!(count >= ceiling, "refused below the ceiling: {count}");
    assert!(count <= ceiling + plan.slack(bound), "{count}");
    // Each guard was refused holding less than one call's tokens.
    assert!(spent + 64 * bound > count, "{spent} spent, {count} counted");
    assert_eq!(notices.load(Ordering::Relaxed), 1, "one notice");
    for guard in &guards {
        guard.give_back_lease().await;
    }
    assert_eq!(
        counted(store.as_ref()).await,
        spent,
        "counted what was spent"
    );
}

/// The usage port behind the limits model's usage table: every `ADD` (granted or refused by its
/// condition) takes one write unit of its counter's partition, or is throttled.
struct ChargedUsage {
    inner: MemoryStore,
    model: LimitsModel,
}

#[async_trait]
impl UsageStore for ChargedUsage {
    async fn add_to_counter(&self, request: UsageRequest<'_>) -> Result<Option<i64>, StoreError> {
        let charge = Charge {
            target: Target::base("agentUsage"),
            key: request.counter().0,
            capacity: Capacity::Write,
            units: 1.0,
        };
        self.model
            .charge("UpdateItem", &[charge])
            .map_err(|t| StoreError::throttled(t.to_string()))?;
        self.inner.add_to_counter(request).await
    }
}

/// 2,000 chat model calls a second for 60 s (simulated) from 2,000 containers, on DynamoDB's
/// per-partition limit (1,000 WCU/s), through the ceiling in the middle of the run: no write on
/// the usage table is throttled, the busiest partition stays under 1,000 WCU/s, and the
/// spend stays within what was left of the ceiling plus the slack.
#[tokio::test]
async fn two_thousand_model_calls_a_second_throttle_no_usage_write() {
    const CONTAINERS: usize = 2_000;
    const CALLS_PER_MS: usize = 2;
    const SECONDS: u64 = 60;
    let model = LimitsModel::with_frozen_clock(Limits::default());
    let store = Arc::new(ChargedUsage {
        inner: MemoryStore::new(),
        model,
    });
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let ceiling = 4 * LEASE_CEILING;
    let request = request("hi", 375);
    let (bound, used) = (token_bound(&request), 300);
    // The day's evening: all but 18,000,000 tokens already counted (about 30 s at this rate).
    let left = 18_000_000;
    let day = day();
    let shard_share = ceiling.div_ceil(u64::from(SHARDS));
    for shard in 0..SHARDS {
        let counter = shard_counter("chat", shard);
        store
            .inner
            .reserve_tokens(
                &counter,
                &day.key,
                shard_share - left / u64::from(SHARDS),
                u64::MAX,
                day.expire_at(),
            )
            .await
            .unwrap();
    }
    let before = counted(&store.inner).await;
    let usage: Arc<dyn UsageStore> = store.clone();
    let guards: Vec<SpendGuard> = (0..CONTAINERS)
        .map(|_| SpendGuard::new(usage.clone(), clock.clone(), SpendApi::Chat, ceiling))
        .collect();
    let plan = guards[0].plan();
    let (mut spent, mut calls, mut refused, mut uncounted) = (0u64, 0u64, 0u64, 0u64);
    // Each call to any container, as Lambda routes it to an idle one.
    let mut containers = fastrand::Rng::with_seed(50);
    for _ in 0..SECONDS * 1000 {
        for _ in 0..CALLS_PER_MS {
            let guard = &guards[containers.usize(..CONTAINERS)];
            match guard.reserve(&request).await {
                Ok(Some(reserved)) => {
                    calls += 1;
                    spent += used;
                    guard.settle(&reserved, used).await;
                }
                Ok(None) => uncounted += 1,
                Err(_) => refused += 1,
            }
        }
        store.model.advance(std::time::Duration::from_millis(1));
        clock.advance(chrono::Duration::milliseconds(1));
    }
    let stats = store.model.stats();
    let usage_table = Target::base("agentUsage");
    let writes = stats.consumed.get(&usage_table).map_or(0.0, |c| c.wcu);
    let hottest = stats
        .hottest_write
        .as_ref()
        .map_or(0.0, |h| h.units_per_sec);
    // Until the first refusal (20 s in), every model call is admitted.
    let early: f64 = stats
        .by_second
        .range(..20)
        .filter_map(|(_, t)| t.get(&usage_table))
        .map(|c| c.wcu)
        .sum();
    println!(
        "first 20 s: usage table {:.1} writes/s, {:.4} a model call",
        early / 20.0,
        early / (20.0 * 2000.0)
    );
    println!(
        "{calls} model calls, {refused} refused, {uncounted} uncounted: usage table {:.1} writes/s, \
         {:.3} a model call, busiest partition {hottest} WCU/s; spent {spent} of the {left} left \
         (slack {})",
        writes / SECONDS as f64,
        writes / (calls + refused) as f64,
        plan.slack(bound),
    );
    assert_eq!(stats.throttled(), 0, "{stats}");
    assert_eq!(uncounted, 0);
    assert!(hottest < 1000.0, "{hottest} WCU/s on one partition");
    assert!(refused > 0, "the run passes the ceiling");
    assert!(spent <= left + plan.slack(bound), "{spent} spent");
    let counted = counted(&store.inner).await - before;
    assert!(counted <= left + plan.slack(bound), "{counted} counted");
}

/// The chat count of `day` over every shard (reserving 0 reads a counter).
async fn counted_on(store: &dyn UsageStore, day: &UsageDay) -> u64 {
    let mut total = 0;
    for shard in 0..SHARDS {
        let counter = shard_counter("chat", shard);
        if let SpendOutcome::Reserved { total: t } = store
            .reserve_tokens(&counter, &day.key, 0, u64::MAX, day.expire_at())
            .await
            .unwrap()
        {
            total += t;
        }
    }
    total
}

/// A block is spent locally (no write a call), what is left goes back at the first settlement
/// 30 s after the lease and when the day turns (to that day's count), and a counter that fails
/// lets the call through uncounted.
#[tokio::test]
async fn a_block_goes_back_after_30_s_and_at_the_days_turn_and_a_failing_counter_fails_open() {
    let store: Arc<dyn UsageStore> = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let guard = SpendGuard::new(store.clone(), clock.clone(), SpendApi::Chat, LEASE_CEILING);
    let request = request("hi", 375);
    let bound = token_bound(&request);
    let day = day();
    let call = async |used: u64| {
        let reserved = guard.reserve(&request).await.unwrap().expect("counted");
        guard.settle(&reserved, used).await;
    };

    call(100).await;
    assert_eq!(
        counted_on(store.as_ref(), &day).await,
        8 * bound,
        "one block"
    );
    call(100).await;
    assert_eq!(
        counted_on(store.as_ref(), &day).await,
        8 * bound,
        "spent locally"
    );
    clock.advance(chrono::Duration::seconds(30));
    call(100).await;
    assert_eq!(counted_on(store.as_ref(), &day).await, 300, "what was used");

    call(100).await;
    clock.set(day.ends_at);
    let next = UsageDay::of(day.ends_at);
    call(100).await;
    assert_eq!(
        counted_on(store.as_ref(), &day).await,
        400,
        "the last day's back"
    );
    assert_eq!(counted_on(store.as_ref(), &next).await, 8 * bound);

    let failing: Arc<dyn UsageStore> = Arc::new(koe_testkit::harness::FailingStore);
    let guard = SpendGuard::new(failing, clock, SpendApi::Chat, LEASE_CEILING);
    assert!(guard.reserve(&request).await.unwrap().is_none());
}
