//! A minute's calls past what the calls table's write budget serves in one second
//! (`calls_on_time`: 3 calls a WRU/s of `DISPATCH_WRITE_BUDGET`): the create whose raise of the minute's count (by
//! 32, one create in 32) takes it past writes `MinuteOverCapacity` once, the creates before and
//! after it nothing; on each store.

use std::sync::Arc;

use koe::domain::due::raises_count;
use koe::domain::reservation::{CallId, ScheduledAt};
use koe::store::Store;
use koe::store::memory::MemoryStore;
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{TestApp, spawn_app_with};
use serde_json::Value;

use super::{AT, NOW, create, now, register};

/// Another minute than `AT`'s, 90 s ahead of `NOW`.
const NEXT_MINUTE: &str = "2026-03-01T09:01:30+09:00";

fn over_capacity(app: &TestApp) -> Vec<Value> {
    app.metric_lines()
        .into_iter()
        .filter(|line| line.get("MinuteOverCapacity").is_some())
        .collect()
}

/// Registers `device` and reserves it a call at `at`; whether its call id is one that raises
/// its minute's count (`koe::domain::due::raises_count`), and the `MinuteOverCapacity` lines
/// so far.
async fn reserve(app: &TestApp, device: &str, at: &str) -> (bool, usize) {
    register(app, device).await;
    let made = create(app, device, at).await;
    let call_id = CallId::from_stored(made["callId"].as_str().unwrap().to_owned());
    (raises_count(&call_id), over_capacity(app).len())
}

/// Reserves calls at `at` (devices `{prefix}1`, ...) until three creates have raised its count
/// (each by 32: 32, 64, 96), checking after each that the minute was told (once,
/// `told_before` and one more lines in all) from its raise number `told_at` on (the second:
/// 64 calls past a budget of 40), not before. The minute's count at the end.
async fn fill(
    app: &TestApp,
    store: &Arc<dyn Store>,
    (prefix, at): (&str, &str),
    told_before: usize,
    told_at: usize,
) -> u32 {
    let mut raised = 0;
    // Three raises in 1,000 creates: all but certain (fewer: about 1 in 10^9).
    for i in 1..=1_000 {
        let (raises, told) = reserve(app, &format!("{prefix}{i}"), at).await;
        if raises {
            raised += 1;
        }
        let expected = told_before + usize::from(raised >= told_at);
        assert_eq!(told, expected, "call {i}, after {raised} raises");
        if raised == 3 {
            let minute = ScheduledAt::parse("scheduledAt", at, now())
                .unwrap()
                .due_minute();
            return store.due_count(&minute).await.unwrap();
        }
    }
    panic!("fewer than 3 of 1,000 creates raised the count");
}

async fn the_create_that_takes_a_minute_past_the_budget_tells_it_once(store: Arc<dyn Store>) {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    // 14 WRU a second: the plan rings 40 calls of one second on time (`calls_on_time`).
    let app = spawn_app_with(&[("DISPATCH_WRITE_BUDGET", "14")], |app| {
        app.with_store(store.clone()).with_clock(clock.clone())
    })
    .await;
    assert_eq!(fill(&app, &store, ("cap-a", AT), 0, 2).await, 3 * 32);
    let [line] = over_capacity(&app).try_into().unwrap();
    assert_eq!(line["MinuteOverCapacity"], 1, "{line}");
    assert_eq!(line["Function"], "create-call", "{line}");
    assert_eq!(
        line["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        "Koe/Dispatch"
    );
    // Another minute is told for itself, by its own second raise.
    assert_eq!(
        fill(&app, &store, ("cap-b", NEXT_MINUTE), 1, 2).await,
        3 * 32
    );
    assert_eq!(over_capacity(&app).len(), 2);
}

on_each_store!(the_create_that_takes_a_minute_past_the_budget_tells_it_once);

/// With claims abandoned after 10 s their lead (3 s) binds, not the outcomes': the same 14 WRU
/// a second ring 13 calls of one second on time, so the minute is told at its first raise (32).
#[tokio::test]
async fn a_short_claim_timeout_tells_a_minute_sooner() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let vars = [
        ("DISPATCH_WRITE_BUDGET", "14"),
        ("DISPATCH_CLAIM_TIMEOUT_SECS", "10"),
    ];
    let app = spawn_app_with(&vars, |app| {
        app.with_store(store.clone()).with_clock(clock.clone())
    })
    .await;
    assert_eq!(fill(&app, &store, ("cap-short", AT), 0, 1).await, 3 * 32);
}
