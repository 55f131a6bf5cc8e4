//! Many calls due in the very same second (everyone's 07:00:00), on the real clock, in a debug
//! build on a shared machine: every push leaves exactly once and never before its second, with a
//! stand-in APNs that takes 5 ms a push. Memory store: 10,000 calls. DynamoDB Local: 200. How
//! late they leave is printed, not asserted: a busy machine changes it, and its figures belong
//! to the benches (`bench/dispatch-precision.sh`, `bench/spike-local.sh`: docs/benchmarks.md).
//! The run's window is shortened so the test takes seconds.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{FixedOffset, Utc};
use koe::dispatch::{Dispatcher, RunCause};
use koe::platform::clock::{Clock, SystemClock};
use koe::platform::config::{Config, Vars};
use koe::store::prelude::*;
use koe_testkit::dispatching::reserve_at;
use koe_testkit::push::RecordingPushSender;

async fn all_due_in_one_second_leave_within_it(
    store: Arc<dyn Store>,
    calls: usize,
    lead_secs: i64,
) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let push = Arc::new(RecordingPushSender::new(clock.clone()));
    push.set_latency(StdDuration::from_millis(5));
    let mut settings = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    settings.window = StdDuration::from_secs(lead_secs as u64 + 2);
    settings.reselect_every = StdDuration::from_secs(1);

    // Every call at the same whole second, `lead_secs` from now (written in JST, as clients do).
    let now = Utc::now();
    let second = chrono::DateTime::from_timestamp(now.timestamp() + lead_secs, 0).unwrap();
    let setup_slots = Arc::new(tokio::sync::Semaphore::new(32));
    let jst = FixedOffset::east_opt(9 * 3600).unwrap();
    let setup: Vec<_> = (0..calls)
        .map(|i| {
            let (store, slots) = (store.clone(), setup_slots.clone());
            tokio::spawn(async move {
                let _slot = slots.acquire().await.unwrap();
                let (name, token) = (format!("load-{i}"), format!("{i:064x}"));
                reserve_at(&*store, &name, &token, second.with_timezone(&jst), now).await;
            })
        })
        .collect();
    for task in setup {
        task.await.unwrap();
    }
    // A setup slower than the lead (a busy machine) leaves the calls overdue: still within
    // grace, so sent at once, exactly once; only the printed lateness shows it.

    let dispatcher = Dispatcher::new(store, push.clone(), clock, settings, "load");
    let report = dispatcher.run(RunCause::Local).await;

    assert_eq!(report.sent as usize, calls, "{report:?}");
    let sent = push.sent();
    assert_eq!(sent.len(), calls);
    let earliest = sent.iter().map(|p| p.at).min().unwrap();
    let latest = sent.iter().map(|p| p.at).max().unwrap();
    assert!(earliest >= second, "never early: {earliest} < {second}");
    let max = report.max_lateness_ms().unwrap();
    eprintln!(
        "{calls} calls due at one second: lateness p50 {} ms, p99 {} ms, max {max} ms \
         (last push left {} ms after the second)",
        report.lateness_percentile(50).unwrap(),
        report.lateness_percentile(99).unwrap(),
        (latest - second).num_milliseconds(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_10000_due_in_one_second_all_leave_within_it() {
    let store = Arc::new(koe::store::memory::MemoryStore::new());
    all_due_in_one_second_leave_within_it(store, 10_000, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_200_due_in_one_second_all_leave_within_it() {
    let store = koe_testkit::dynamodb::fresh_store().await;
    all_due_in_one_second_leave_within_it(Arc::new(store), 200, 5).await;
}
