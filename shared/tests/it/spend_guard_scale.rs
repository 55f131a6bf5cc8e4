//! The spend guard at the API's rate (docs/spend-guard.md, "At scale"): at every ceiling each
//! guard (a container) reads, then leases blocks of tokens from sharded counters, so no item
//! takes a write per model call, and the ceiling still holds within the stated slack.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use koe::domain::chat::{ChatMessage, Role};
use koe::domain::usage_day::UsageDay;
use koe::model::spend_guard::lease::shard_counter;
use koe::model::spend_guard::{LeasePlan, SpendApi, SpendGuard, token_bound};
use koe::model::{ModelRequest, ProviderError};
use koe::platform::config::spend::DEFAULT_DAILY_TOKEN_CEILING;
use koe::store::memory::MemoryStore;
use koe::store::{StoreError, UsageRequest, UsageStore};
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
async fn counted(store: &dyn UsageStore, plan: LeasePlan) -> u64 {
    counted_on(store, &day(), plan).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_ceiling_holds_under_64_concurrent_callers_racing_past_it() {
    for ceiling in [60_000, DEFAULT_DAILY_TOKEN_CEILING, 100_000_000] {
        race_past_the_ceiling(Arc::new(MemoryStore::new()), ceiling).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_ceiling_holds_under_64_concurrent_callers_racing_past_it_on_dynamodb() {
    for ceiling in [DEFAULT_DAILY_TOKEN_CEILING, 100_000_000] {
        race_past_the_ceiling(
            Arc::new(koe_testkit::dynamodb::fresh_store().await),
            ceiling,
        )
        .await;
    }
}

/// 64 containers race past `ceiling`, each calling until it is refused: the count reaches the
/// ceiling (but for what calls still in flight gave back after), passes it by at most one call
/// a shard, and what was spent is what is counted once the blocks are returned.
async fn race_past_the_ceiling(store: Arc<dyn UsageStore>, ceiling: u64) {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
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
    let count = counted(store.as_ref(), plan).await;
    let slack = plan.slack(bound);
    println!("ceiling {ceiling} ({plan:?}), slack {slack}, counted {count}, spent {spent}");
    // Each guard was refused with every shard full; calls of others still in flight then gave
    // back what they did not use.
    assert!(
        count + 64 * (bound - used) >= ceiling,
        "refused below the ceiling: {count}"
    );
    assert!(count <= ceiling + slack, "{count} counted, slack {slack}");
    // Each guard was refused holding less than one call's tokens.
    assert!(spent + 64 * bound > count, "{spent} spent, {count} counted");
    assert_eq!(notices.load(Ordering::Relaxed), 1, "one notice");
    for guard in &guards {
        guard.give_back_lease().await;
    }
    assert_eq!(
        counted(store.as_ref(), plan).await,
        spent,
        "counted what was spent"
    );
}

/// The usage port behind the limits model's usage table: every `ADD` (granted or refused by its
/// condition) takes one write unit of its counter's partition, every read of a count half a
/// read unit (eventually consistent), or is throttled.
struct ChargedUsage {
    inner: MemoryStore,
    model: LimitsModel,
}

#[async_trait]
impl UsageStore for ChargedUsage {
    async fn add_to_counter(&self, request: UsageRequest<'_>) -> Result<Option<i64>, StoreError> {
        let (operation, capacity, units) = if request.reads() {
            ("GetItem", Capacity::Read, 0.5)
        } else {
            ("UpdateItem", Capacity::Write, 1.0)
        };
        let charge = Charge {
            target: Target::base("agentUsage"),
            key: request.counter().0,
            capacity,
            units,
        };
        self.model
            .charge(operation, &[charge])
            .map_err(|t| StoreError::throttled(t.to_string()))?;
        self.inner.add_to_counter(request).await
    }
}

#[tokio::test]
async fn two_thousand_model_calls_a_second_throttle_no_usage_write_at_a_1m_ceiling() {
    two_thousand_calls_a_second_through(1_000_000).await;
}

#[tokio::test]
async fn two_thousand_model_calls_a_second_throttle_no_usage_write_at_the_default_ceiling() {
    two_thousand_calls_a_second_through(DEFAULT_DAILY_TOKEN_CEILING).await;
}

#[tokio::test]
async fn two_thousand_model_calls_a_second_throttle_no_usage_write_at_a_100m_ceiling() {
    two_thousand_calls_a_second_through(100_000_000).await;
}

/// 2,000 chat model calls a second for 60 s (simulated) from 2,000 containers, on DynamoDB's
/// per-partition limits (1,000 WCU/s, 3,000 RCU/s) and a new table's, through `ceiling` early
/// in the run (what is left of it is at most 18,000,000 tokens, 30 s at this rate): no request
/// on the usage table is throttled, the busiest partition stays under its limit, every call
/// is counted or refused, and the spend stays within what was left plus the slack.
async fn two_thousand_calls_a_second_through(ceiling: u64) {
    const CONTAINERS: usize = 2_000;
    const CALLS_PER_MS: usize = 2;
    const SECONDS: u64 = 60;
    let model = LimitsModel::with_frozen_clock(Limits::default());
    let store = Arc::new(ChargedUsage {
        inner: MemoryStore::new(),
        model,
    });
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let plan = LeasePlan::for_ceiling(ceiling);
    let request = request("hi", 375);
    let (bound, used) = (token_bound(&request), 300);
    // The day's evening: all but `left` tokens already counted.
    let left = ceiling.min(18_000_000);
    let day = day();
    let shards = u64::from(plan.shards);
    for shard in 0..plan.shards {
        let counter = shard_counter("chat", shard);
        let seeded = plan.share - left / shards;
        if seeded > 0 {
            store
                .inner
                .reserve_tokens(&counter, &day.key, seeded, u64::MAX, day.expire_at())
                .await
                .unwrap();
        }
    }
    let before = counted(&store.inner, plan).await;
    let usage: Arc<dyn UsageStore> = store.clone();
    let guards: Vec<SpendGuard> = (0..CONTAINERS)
        .map(|_| SpendGuard::new(usage.clone(), clock.clone(), SpendApi::Chat, ceiling))
        .collect();
    let (mut spent, mut calls, mut refused, mut busy, mut uncounted) = (0u64, 0, 0, 0, 0);
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
                Err(ProviderError::CounterBusy { .. }) => busy += 1,
                Err(_) => refused += 1,
            }
        }
        store.model.advance(std::time::Duration::from_millis(1));
        clock.advance(chrono::Duration::milliseconds(1));
    }
    let stats = store.model.stats();
    let usage_table = Target::base("agentUsage");
    let consumed = stats.consumed.get(&usage_table);
    let (writes, reads) = consumed.map_or((0.0, 0.0), |c| (c.wcu, c.rcu));
    let hottest = |h: &Option<koe_testkit::dynamodb::limits::Hottest>| {
        h.as_ref().map_or(0.0, |h| h.units_per_sec)
    };
    let (hottest_write, hottest_read) =
        (hottest(&stats.hottest_write), hottest(&stats.hottest_read));
    let counted = counted(&store.inner, plan).await - before;
    let slack = plan.slack(bound);
    println!(
        "ceiling {ceiling} ({plan:?}): {calls} model calls, {refused} refused, {busy} busy, \
         {uncounted} uncounted; usage table {:.1} writes/s ({:.3} a call), {:.1} read units/s, \
         busiest partition {hottest_write} WCU/s, {hottest_read} RCU/s; spent {spent}, counted \
         {counted} of the {left} left (slack {slack}); throttled {}",
        writes / SECONDS as f64,
        writes / (calls + refused) as f64,
        reads / SECONDS as f64,
        stats.throttled(),
    );
    assert_eq!(stats.throttled(), 0, "{stats}");
    assert_eq!((uncounted, busy), (0, 0));
    assert!(
        hottest_write < 1000.0,
        "{hottest_write} WCU/s on one partition"
    );
    assert!(
        hottest_read < 3000.0,
        "{hottest_read} RCU/s on one partition"
    );
    assert!(refused > 0, "the run passes the ceiling");
    assert!(spent <= counted, "{spent} spent, {counted} counted");
    assert!(counted <= left + slack, "{counted} counted");
}

/// The chat count of `day` over every shard of `plan`.
async fn counted_on(store: &dyn UsageStore, day: &UsageDay, plan: LeasePlan) -> u64 {
    let mut total = 0;
    for shard in 0..plan.shards {
        let counter = shard_counter("chat", shard);
        total += store.read_tokens(&counter, &day.key).await.unwrap();
    }
    total
}

/// A block is spent locally (no write a call), what is left goes back at the first settlement
/// 30 s after the lease and when the day turns (to that day's count), and a counter that fails
/// lets the call through, counted with the next write that answers.
#[tokio::test]
async fn a_block_goes_back_after_30_s_and_at_the_days_turn_and_a_failing_counter_fails_open() {
    let store: Arc<dyn UsageStore> = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let ceiling = 100_000_000;
    let plan = LeasePlan::for_ceiling(ceiling);
    let guard = SpendGuard::new(store.clone(), clock.clone(), SpendApi::Chat, ceiling);
    let request = request("hi", 375);
    let bound = token_bound(&request);
    let day = day();
    let call = async |used: u64| {
        let reserved = guard.reserve(&request).await.unwrap().expect("counted");
        guard.settle(&reserved, used).await;
    };

    call(100).await;
    assert_eq!(
        counted_on(store.as_ref(), &day, plan).await,
        8 * bound,
        "one block"
    );
    call(100).await;
    assert_eq!(
        counted_on(store.as_ref(), &day, plan).await,
        8 * bound,
        "spent locally"
    );
    clock.advance(chrono::Duration::seconds(30));
    call(100).await;
    assert_eq!(
        counted_on(store.as_ref(), &day, plan).await,
        300,
        "what was used"
    );

    call(100).await;
    clock.set(day.ends_at);
    let next = UsageDay::of(day.ends_at);
    call(100).await;
    assert_eq!(
        counted_on(store.as_ref(), &day, plan).await,
        400,
        "the last day's back"
    );
    assert_eq!(counted_on(store.as_ref(), &next, plan).await, 8 * bound);

    let failing: Arc<dyn UsageStore> = Arc::new(koe_testkit::harness::FailingStore);
    let guard = SpendGuard::new(failing, clock, SpendApi::Chat, ceiling);
    assert!(guard.reserve(&request).await.unwrap().is_none());
}

/// A usage store that fails while told to (an outage, or throttling), else the memory store's,
/// counting the reads and writes it answers.
struct Flaky {
    inner: MemoryStore,
    fails: std::sync::Mutex<Option<StoreError>>,
    reads: AtomicU64,
    writes: AtomicU64,
}

impl Default for Flaky {
    fn default() -> Flaky {
        Flaky {
            inner: MemoryStore::new(),
            fails: std::sync::Mutex::new(None),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        }
    }
}

#[async_trait]
impl UsageStore for Flaky {
    async fn add_to_counter(&self, request: UsageRequest<'_>) -> Result<Option<i64>, StoreError> {
        if let Some(e) = self.fails.lock().unwrap().clone() {
            return Err(e);
        }
        let answered = if request.reads() {
            &self.reads
        } else {
            &self.writes
        };
        answered.fetch_add(1, Ordering::Relaxed);
        self.inner.add_to_counter(request).await
    }
}

/// A counter that does not answer lets calls through and counts their tokens with its next
/// write that answers; a throttled one refuses the call (503 with `Retry-After`, no model
/// call) rather than let it through uncounted.
#[tokio::test]
async fn an_unanswered_counter_is_counted_later_and_a_throttled_one_refuses() {
    let store = Arc::new(Flaky::default());
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let ceiling = DEFAULT_DAILY_TOKEN_CEILING;
    let plan = LeasePlan::for_ceiling(ceiling);
    let guard = SpendGuard::new(store.clone(), clock, SpendApi::Chat, ceiling);
    let request = request("hi", 375);
    let bound = token_bound(&request);

    *store.fails.lock().unwrap() = Some(StoreError::new("unreachable"));
    for _ in 0..2 {
        assert!(
            guard.reserve(&request).await.unwrap().is_none(),
            "fail-open"
        );
    }
    *store.fails.lock().unwrap() = None;
    let reserved = guard.reserve(&request).await.unwrap().expect("counted");
    guard.settle(&reserved, bound).await;
    assert_eq!(
        counted(&store.inner, plan).await,
        8 * bound + 2 * bound,
        "a block, and the two calls let through"
    );
    guard.give_back_lease().await;
    assert_eq!(counted(&store.inner, plan).await, 3 * bound);

    *store.fails.lock().unwrap() = Some(StoreError::throttled("throttled"));
    match guard.reserve(&request).await {
        Err(e @ ProviderError::CounterBusy { retry_after_secs }) => {
            assert_eq!(retry_after_secs, 1);
            let answer = koe::platform::error::ApiError::from(e);
            assert_eq!(answer.status().as_u16(), 503);
        }
        other => panic!("{:?}", other.map(|r| r.map(|r| r.bound()))),
    }
}

/// Past the ceiling a guard finds each shard full by reading it, asks none of them again for
/// the hold, then reads again: a refusal costs reads, and (once a day) the notice's one claim.
#[tokio::test]
async fn refusals_past_the_ceiling_cost_reads_not_writes() {
    let store = Arc::new(Flaky::default());
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let ceiling = DEFAULT_DAILY_TOKEN_CEILING;
    let plan = LeasePlan::for_ceiling(ceiling);
    let day = day();
    for shard in 0..plan.shards {
        let counter = shard_counter("chat", shard);
        store
            .inner
            .reserve_tokens(&counter, &day.key, plan.share, u64::MAX, day.expire_at())
            .await
            .unwrap();
    }
    let request = request("hi", 375);
    let guards: Vec<SpendGuard> = (0..3)
        .map(|_| SpendGuard::new(store.clone(), clock.clone(), SpendApi::Chat, ceiling))
        .collect();
    for guard in &guards {
        for _ in 0..5 {
            let refused = guard.reserve(&request).await;
            assert!(matches!(refused, Err(ProviderError::CeilingReached { .. })));
        }
    }
    let shards = u64::from(plan.shards);
    // Each guard: every shard read once, the notice read once; one claim of it in all.
    assert_eq!(store.reads.load(Ordering::Relaxed), 3 * (shards + 1));
    assert_eq!(
        store.writes.load(Ordering::Relaxed),
        1,
        "the notice's claim"
    );
    clock.advance(chrono::Duration::seconds(16));
    let refused = guards[0].reserve(&request).await;
    assert!(matches!(
        refused,
        Err(ProviderError::CeilingReached { notify: false, .. })
    ));
    assert_eq!(
        store.reads.load(Ordering::Relaxed),
        3 * (shards + 1) + shards
    );
    assert_eq!(store.writes.load(Ordering::Relaxed), 1);
}
