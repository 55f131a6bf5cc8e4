//! The agent's counters: calls per device and day, answers per plan, tokens against the ceiling.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use koe::domain::device::DeviceId;
use koe::store::{SpendOutcome, UsageOutcome};
use tokio::sync::Barrier;

use super::{DynStore, new_device_id, t0};

fn counted(count: u32) -> UsageOutcome {
    UsageOutcome::Counted { count }
}

const DAY: &str = "2035-03-01";
const NEXT_DAY: &str = "2035-03-02";

fn usage_expiry(day_end: DateTime<Utc>) -> i64 {
    (day_end + Duration::days(7)).timestamp()
}

async fn count(store: &DynStore, id: &DeviceId, day: &str, limit: u32) -> UsageOutcome {
    store
        .count_agent_use(id, day, limit, usage_expiry(t0()))
        .await
        .expect("count_agent_use")
}

async fn usage_counts_up_to_the_limit_then_refuses_without_counting(store: DynStore) {
    let id = new_device_id();
    for n in 1..=3 {
        assert_eq!(count(&store, &id, DAY, 3).await, counted(n));
    }
    assert_eq!(count(&store, &id, DAY, 3).await, UsageOutcome::LimitReached);
    assert_eq!(count(&store, &id, DAY, 3).await, UsageOutcome::LimitReached);
    // Refusals counted nothing: with a higher limit the count goes on from 3.
    assert_eq!(count(&store, &id, DAY, 4).await, counted(4));
    assert_eq!(count(&store, &id, DAY, 4).await, UsageOutcome::LimitReached);
}

async fn usage_is_counted_per_day_and_per_device(store: DynStore) {
    let (a, b) = (new_device_id(), new_device_id());
    assert_eq!(count(&store, &a, DAY, 2).await, counted(1));
    assert_eq!(count(&store, &a, DAY, 2).await, counted(2));
    assert_eq!(count(&store, &a, DAY, 2).await, UsageOutcome::LimitReached);
    assert_eq!(
        count(&store, &a, NEXT_DAY, 2).await,
        counted(1),
        "a new day"
    );
    assert_eq!(
        count(&store, &b, DAY, 2).await,
        counted(1),
        "another device"
    );
    assert_eq!(count(&store, &b, DAY, 2).await, counted(2));
    assert_eq!(count(&store, &a, NEXT_DAY, 2).await, counted(2));
    assert_eq!(count(&store, &a, DAY, 2).await, UsageOutcome::LimitReached);
}

/// Runs `n` tasks made by `task`, released together by a barrier; their answers in order.
async fn all_at_once<T, F, Fut>(n: usize, task: F) -> Vec<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let barrier = Arc::new(Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (barrier, work) = (barrier.clone(), task());
            tokio::spawn(async move {
                barrier.wait().await;
                work.await
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(n);
    for t in tasks {
        answers.push(t.await.expect("concurrent task"));
    }
    answers
}

/// `callers` concurrent counts for one fresh device on [`DAY`]; the device and the outcomes.
async fn concurrent_usage(
    store: &DynStore,
    callers: usize,
    limit: u32,
) -> (DeviceId, Vec<UsageOutcome>) {
    let id = new_device_id();
    let outcomes = all_at_once(callers, || {
        let (store, id) = (store.clone(), id.clone());
        async move { count(&store, &id, DAY, limit).await }
    })
    .await;
    (id, outcomes)
}

/// The sorted counts of the counted calls, and how many were refused.
fn split(outcomes: &[UsageOutcome]) -> (Vec<u32>, usize) {
    let mut counts: Vec<u32> = outcomes
        .iter()
        .filter_map(|o| match o {
            UsageOutcome::Counted { count } => Some(*count),
            UsageOutcome::LimitReached => None,
        })
        .collect();
    counts.sort_unstable();
    let refused = outcomes.len() - counts.len();
    (counts, refused)
}

/// `callers` concurrent uses under a limit of 50: the device, its sorted counts, the refusals;
/// and its stored count is then at the limit (the refusals counted nothing).
async fn fifty_of(store: &DynStore, callers: usize) -> (DeviceId, Vec<u32>, usize) {
    let (id, outcomes) = concurrent_usage(store, callers, 50).await;
    let (counts, refused) = split(&outcomes);
    assert_eq!(count(store, &id, DAY, 50).await, UsageOutcome::LimitReached);
    (id, counts, refused)
}

async fn concurrent_usage_never_exceeds_the_limit(store: DynStore) {
    let (id, counts, refused) = fifty_of(&store, 60).await;
    assert_eq!(counts, (1..=50).collect::<Vec<u32>>(), "50 distinct counts");
    assert_eq!(refused, 10, "10 refused");
    assert_eq!(count(&store, &id, DAY, 51).await, counted(51));
}

async fn concurrent_usage_at_exactly_the_limit_counts_everyone(store: DynStore) {
    let (_, counts, refused) = fifty_of(&store, 50).await;
    assert_eq!(counts, (1..=50).collect::<Vec<u32>>(), "all 50 counted");
    assert_eq!(refused, 0, "none refused");
}

/// A fresh plan id, as `agent::binding` makes them (14 base64url characters).
fn new_plan_id() -> String {
    format!("p{:013x}", fastrand::u64(..) >> 12)
}

async fn plan_answers_count_up_to_the_bound_per_plan(store: DynStore) {
    let (a, b) = (new_plan_id(), new_plan_id());
    let expire_at = usage_expiry(t0());
    for n in 1..=3 {
        assert_eq!(
            store.count_plan_answer(&a, 3, expire_at).await.unwrap(),
            counted(n)
        );
    }
    for _ in 0..2 {
        assert_eq!(
            store.count_plan_answer(&a, 3, expire_at).await.unwrap(),
            UsageOutcome::LimitReached
        );
    }
    assert_eq!(
        store.count_plan_answer(&b, 3, expire_at).await.unwrap(),
        counted(1),
        "another plan"
    );
    // A plan counter never touches a device's day counter (they share the DynamoDB table).
    let device = new_device_id();
    assert_eq!(count(&store, &device, "answers", 3).await, counted(1));
}

async fn concurrent_plan_answers_never_exceed_the_bound(store: DynStore) {
    let plan = new_plan_id();
    let outcomes = all_at_once(20, || {
        let (store, plan) = (store.clone(), plan.clone());
        async move {
            store
                .count_plan_answer(&plan, 3, usage_expiry(t0()))
                .await
                .unwrap()
        }
    })
    .await;
    let (counts, refused) = split(&outcomes);
    assert_eq!(counts, vec![1, 2, 3]);
    assert_eq!(refused, 17);
}

fn spend_api() -> String {
    // A fresh counter per test run (the DynamoDB tables are fresh, the memory store too; this
    // also keeps the two tests below apart).
    format!("test{:08x}", fastrand::u32(..))
}

async fn reserve(store: &DynStore, api: &str, tokens: u64, ceiling: u64) -> SpendOutcome {
    store
        .reserve_tokens(api, DAY, tokens, ceiling, usage_expiry(t0()))
        .await
        .expect("reserve_tokens")
}

async fn tokens_reserve_below_the_ceiling_settle_both_ways_and_notice_once(store: DynStore) {
    let api = spend_api();
    assert_eq!(
        reserve(&store, &api, 400, 1000).await,
        SpendOutcome::Reserved { total: 400 }
    );
    assert_eq!(
        reserve(&store, &api, 400, 1000).await,
        SpendOutcome::Reserved { total: 800 }
    );
    // Below the ceiling, the reservation may pass it (the bound is one call).
    assert_eq!(
        reserve(&store, &api, 400, 1000).await,
        SpendOutcome::Reserved { total: 1200 }
    );
    assert_eq!(
        reserve(&store, &api, 1, 1000).await,
        SpendOutcome::CeilingReached
    );
    // Corrected down to the usage: below the ceiling again.
    store
        .settle_tokens(&api, DAY, -343 * 3, usage_expiry(t0()))
        .await
        .unwrap();
    assert_eq!(
        reserve(&store, &api, 0, 1000).await,
        SpendOutcome::Reserved { total: 171 }
    );
    store
        .settle_tokens(&api, DAY, 829, usage_expiry(t0()))
        .await
        .unwrap();
    assert_eq!(
        reserve(&store, &api, 0, 1000).await,
        SpendOutcome::CeilingReached
    );
    // Another day and another API count apart.
    assert_eq!(
        store
            .reserve_tokens(&api, NEXT_DAY, 5, 1000, usage_expiry(t0()))
            .await
            .unwrap(),
        SpendOutcome::Reserved { total: 5 }
    );
    assert_eq!(
        reserve(&store, &spend_api(), 5, 1000).await,
        SpendOutcome::Reserved { total: 5 }
    );
    // One notice per API and day.
    let notice = |day: &'static str| {
        let (store, api) = (store.clone(), api.clone());
        async move {
            store
                .claim_ceiling_notice(&api, day, usage_expiry(t0()))
                .await
                .unwrap()
        }
    };
    assert!(notice(DAY).await);
    assert!(!notice(DAY).await);
    assert!(notice(NEXT_DAY).await);
}

async fn concurrent_reservations_stop_exactly_at_the_ceiling_and_one_notice_wins(store: DynStore) {
    let api = spend_api();
    let answers = all_at_once(30, || {
        let (store, api) = (store.clone(), api.clone());
        async move {
            let outcome = store
                .reserve_tokens(&api, DAY, 100, 1000, usage_expiry(t0()))
                .await
                .unwrap();
            let noticed = match outcome {
                SpendOutcome::CeilingReached => store
                    .claim_ceiling_notice(&api, DAY, usage_expiry(t0()))
                    .await
                    .unwrap(),
                SpendOutcome::Reserved { .. } => false,
            };
            (outcome, noticed)
        }
    })
    .await;
    let mut totals = Vec::new();
    let mut notices = 0;
    for (outcome, noticed) in answers {
        if let SpendOutcome::Reserved { total } = outcome {
            totals.push(total);
        }
        notices += usize::from(noticed);
    }
    totals.sort_unstable();
    assert_eq!(totals, (1..=10).map(|n| n * 100).collect::<Vec<u64>>());
    assert_eq!(notices, 1);
    assert_eq!(
        reserve(&store, &api, 0, 1001).await,
        SpendOutcome::Reserved { total: 1000 }
    );
}

contract_suite!(
    usage_counts_up_to_the_limit_then_refuses_without_counting,
    usage_is_counted_per_day_and_per_device,
    plan_answers_count_up_to_the_bound_per_plan,
    tokens_reserve_below_the_ceiling_settle_both_ways_and_notice_once;
    threads 4:
    concurrent_usage_never_exceeds_the_limit,
    concurrent_usage_at_exactly_the_limit_counts_everyone,
    concurrent_plan_answers_never_exceed_the_bound,
    concurrent_reservations_stop_exactly_at_the_ceiling_and_one_notice_wins,
);
