//! A crowded second at the tables' throughput (issue 38): the dispatcher plans its writes within
//! its share of `DISPATCH_WRITE_BUDGET` (`koe::dispatch::plan`), so the calls of one second
//! whose claims, marks and outcomes are several seconds of the table's writes all leave at their
//! second, none throttled, and no second of the calls table or its index takes more than the
//! budget. On the limits model (the embedded store behind `LimitedStore`, each table's and
//! index's warm throughput set to the budget), scaled down: 40 write units a second, 60 calls.
//! On tokio's paused time (the dispatcher's clock and the model's): the plan's timing is
//! checked, not how fast the machine runs it (a real second's lateness: `bench/dispatch-scale.sh`).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use koe::dispatch::{Dispatcher, RunCause, RunReport};
use koe::domain::device::AlertToken;
use koe::domain::reservation::CallId;
use koe::platform::clock::Clock;
use koe::store::DUE_INDEX;
use koe::store::memory::MemoryStore;
use koe_testkit::clock::TokioClock;
use koe_testkit::dispatching::{crowd, reserve_for, short_run};
use koe_testkit::dynamodb::limited_store::LimitedStore;
use koe_testkit::dynamodb::limits::Target;
use koe_testkit::push::{RecordingPushSender, Scripted, device};

const BUDGET: u32 = 40;
/// 120 claims and marks before the second (4 s of the plan's 30 a second) and 60 outcomes
/// after it: at fixed leads they would all fall in about one second.
const CALLS: usize = 60;

/// The second the calls are due: 07:00:00.
fn seven() -> DateTime<Utc> {
    "2026-01-01T07:00:00Z".parse().unwrap()
}

/// An empty store, a paused clock at `now` (before [`seven`]), a push sender recording on it.
fn seconds_before_seven(
    now: &str,
) -> (Arc<MemoryStore>, Arc<TokioClock>, Arc<RecordingPushSender>) {
    let clock = Arc::new(TokioClock::at(now.parse().unwrap()));
    let push = Arc::new(RecordingPushSender::new(clock.clone()));
    (Arc::new(MemoryStore::new()), clock, push)
}

/// One run of `window_secs` on the budget, its store the limits model over `inner`'s calls.
async fn run_on_budget(
    inner: Arc<MemoryStore>,
    push: &Arc<RecordingPushSender>,
    clock: Arc<TokioClock>,
    window_secs: u64,
) -> (Arc<LimitedStore>, RunReport) {
    let store = Arc::new(LimitedStore::on_write_budget(inner, BUDGET));
    let mut settings = short_run();
    settings.window = std::time::Duration::from_secs(window_secs);
    settings.write_budget = BUDGET;
    let report = Dispatcher::new(store.clone(), push.clone(), clock, settings, "budget")
        .run(RunCause::Local)
        .await;
    (store, report)
}

/// No write was throttled, and no second of any of `targets` took more than the budget.
fn assert_within_budget<const N: usize>(store: &LimitedStore, targets: [Target; N]) {
    let stats = store.model().stats();
    assert_eq!(stats.throttled(), 0, "{:?}", stats.throttled_by_target);
    for target in targets {
        let per_second: Vec<f64> = stats
            .by_second
            .values()
            .filter_map(|t| t.get(&target).map(|c| c.wcu))
            .collect();
        assert!(
            per_second.iter().all(|w| *w <= f64::from(BUDGET)),
            "{target:?}: write units second by second {per_second:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_second_of_more_calls_than_its_writes_fit_leaves_on_time_within_the_budget() {
    let (inner, clock, push) = seconds_before_seven("2026-01-01T06:59:52Z");
    let (now, at) = (clock.now(), seven());
    let calls = crowd(inner.as_ref(), "budget", CALLS, at, now).await;
    let (store, report) = run_on_budget(inner, &push, clock, 10).await;

    for r in &calls {
        let sent = push.sent_for_call(r.call_id.as_str());
        assert_eq!(sent.len(), 1, "{report:?}");
        let late = sent[0].at - at;
        assert!(
            late >= chrono::Duration::zero() && late < chrono::Duration::seconds(1),
            "pushed {late} after its second ({report:?})"
        );
    }
    assert_within_budget(
        &store,
        [Target::base("calls"), Target::index("calls", DUE_INDEX)],
    );
}

/// Calls in [`a_second_of_failed_pushes_sends_its_notices_within_the_budget`]: their claims and
/// marks take 7 of the plan's 10 s before the second, their outcomes and notices 10 of its 12 s
/// after it (unplanned, the notices were throttled 423 times).
const DOWN: usize = 100;

/// APNs down for a crowded second: every push fails (5xx past the push budget), so each call
/// is recorded `failed` and gets its missed-call notice, two more writes each (the notice's
/// claim and its record). They are planned too (`WritePlan::notice`): every notice sent once,
/// no write throttled, no second over the budget.
#[tokio::test(start_paused = true)]
async fn a_second_of_failed_pushes_sends_its_notices_within_the_budget() {
    let (inner, clock, push) = seconds_before_seven("2026-01-01T06:59:47Z");
    let (now, at) = (clock.now(), seven());
    let mut calls = Vec::new();
    for i in 0..DOWN {
        let mut d = device(&format!("down-{i:04}"), &format!("{:064x}", i + 1), now);
        d.alert_token = Some(AlertToken::parse("alertToken", &format!("{:064x}", i + 1)).unwrap());
        push.script(d.device_id.as_str(), vec![Scripted::server_error(); 20]);
        let call = CallId::generate();
        calls.push(reserve_for(inner.as_ref(), &d, at.fixed_offset(), None, now, call).await);
    }
    let (store, report) = run_on_budget(inner, &push, clock, 15).await;

    assert_eq!(report.failed as usize, DOWN, "{report:?}");
    for r in &calls {
        let notices = push.alerts_for_call(r.call_id.as_str());
        assert_eq!(notices.len(), 1, "one notice a call: {report:?}");
    }
    assert_within_budget(&store, [Target::base("calls")]);
}
