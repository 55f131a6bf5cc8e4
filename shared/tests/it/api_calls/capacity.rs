//! A minute's calls past what the calls table's write budget serves in one second
//! (`DISPATCH_WRITE_BUDGET` / 3 WRU a call): the create that takes the minute past it writes
//! `MinuteOverCapacity` once, the creates before and after it nothing; on each store.

use std::sync::Arc;

use koe::store::Store;
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{TestApp, spawn_app_with};
use serde_json::Value;

use super::{AT, NOW, create, register};

/// Another minute than `AT`'s, 90 s ahead of `NOW`.
const NEXT_MINUTE: &str = "2026-03-01T09:01:30+09:00";

fn over_capacity(app: &TestApp) -> Vec<Value> {
    app.metric_lines()
        .into_iter()
        .filter(|line| line.get("MinuteOverCapacity").is_some())
        .collect()
}

/// Registers `device` and reserves it a call at `at`; returns the `MinuteOverCapacity` lines
/// so far.
async fn reserve(app: &TestApp, device: &str, at: &str) -> usize {
    register(app, device).await;
    create(app, device, at).await;
    over_capacity(app).len()
}

async fn the_create_that_takes_a_minute_past_the_budget_tells_it_once(store: Arc<dyn Store>) {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    // 30 WRU a second: 10 calls fill a minute.
    let app = spawn_app_with(&[("DISPATCH_WRITE_BUDGET", "30")], |app| {
        app.with_store(store).with_clock(clock.clone())
    })
    .await;
    for i in 1..=10 {
        assert_eq!(reserve(&app, &format!("cap-a{i}"), AT).await, 0, "call {i}");
    }
    assert_eq!(
        reserve(&app, "cap-a11", AT).await,
        1,
        "the 11th takes it past"
    );
    let [line] = over_capacity(&app).try_into().unwrap();
    assert_eq!(line["MinuteOverCapacity"], 1, "{line}");
    assert_eq!(line["Function"], "create-call", "{line}");
    assert_eq!(
        line["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        "Koe/Dispatch"
    );
    assert_eq!(reserve(&app, "cap-a12", AT).await, 1, "the minute was told");
    // Another minute is told for itself, by its own 11th create.
    for i in 1..=10 {
        assert_eq!(reserve(&app, &format!("cap-b{i}"), NEXT_MINUTE).await, 1);
    }
    assert_eq!(reserve(&app, "cap-b11", NEXT_MINUTE).await, 2);
}

on_each_store!(the_create_that_takes_a_minute_past_the_budget_tells_it_once);
