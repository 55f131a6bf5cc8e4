//! Throttling on DynamoDB Local behind the limits model (`koe_testkit::dynamodb::limits_proxy`,
//! DynamoDB's per-partition limits answering `ThrottlingException`), with the production-like
//! client (deployed timeouts, the SDK's standard retries) and the dispatcher's own timing but a
//! short window. The model's clock moves only when a test moves it: a partition is used up
//! (`debit`) before the run, and given its capacity back once a request has been throttled, as a
//! burst that passes would. Each way ends with exactly one push, by the run, never early, never
//! two (how late is printed, not asserted: a busy machine changes it):
//! - a throttled claim is made again by its run until answered;
//! - a throttled finish (index back-pressure: the finish removes the call's index entry) is
//!   retried by the dispatcher until it is recorded;
//! - a throttled selection (the shard's query) is made again by the next re-selection.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::Utc;
use koe::dispatch::RunReport;
use koe::domain::due::shard_key;
use koe::domain::reservation::{Reservation, ReservationStatus};
use koe::platform::clock::SystemClock;
use koe::store::DUE_INDEX;
use koe::store::dynamodb::DynamoStore;
use koe::store::prelude::*;
use koe_testkit::dispatching::{reserve_soon_as, stored};
use koe_testkit::dynamodb::limits::{Capacity, Charge, Limits, LimitsModel, Target};
use koe_testkit::dynamodb::limits_proxy::LimitsProxy;
use koe_testkit::dynamodb::{self};
use koe_testkit::faults;
use koe_testkit::push::RecordingPushSender;

use crate::count_estimate::call_id_that_counts;

struct World {
    proxy: LimitsProxy,
    store: Arc<DynamoStore>,
    calls_table: String,
    push: Arc<RecordingPushSender>,
}

impl World {
    async fn new() -> World {
        let upstream = tokio::task::spawn_blocking(dynamodb::endpoint)
            .await
            .unwrap();
        let setup = dynamodb::client().await;
        let tables = dynamodb::create_tables(&setup, &dynamodb::random_prefix()).await;
        let model = Arc::new(LimitsModel::with_frozen_clock(Limits::default()));
        let proxy = LimitsProxy::over_tables(&upstream, &tables, model).await;
        let client = dynamodb::production_like_client(&proxy.url());
        World {
            calls_table: tables.calls.clone(),
            store: Arc::new(DynamoStore::new(client, tables)),
            proxy,
            push: Arc::new(RecordingPushSender::new(Arc::new(SystemClock))),
        }
    }

    async fn reserve(&self, name: &str, in_ms: i64) -> Reservation {
        koe_testkit::dispatching::reserve_soon(self.store.as_ref(), name, in_ms).await
    }

    /// Uses up `units` of a partition's capacity.
    fn use_up(&self, target: Target, key: &str, capacity: Capacity, units: f64) {
        self.proxy.model().debit(&[Charge {
            target,
            key: key.to_owned(),
            capacity,
            units,
        }]);
    }

    /// Once `throttles` requests of `operation` have been throttled, lets a few seconds pass on
    /// the model's clock (the burst is over: every partition refills).
    fn pass_the_burst_after(&self, operation: &'static str, throttles: u64) {
        let model = self.proxy.model().clone();
        tokio::spawn(async move {
            while model
                .stats()
                .throttled_by_operation
                .get(operation)
                .is_none_or(|n| *n < throttles)
            {
                tokio::time::sleep(StdDuration::from_millis(2)).await;
            }
            model.advance(StdDuration::from_secs(5));
        });
    }

    /// One run: 3 s window, re-selection every 500 ms, the deployed timing otherwise.
    async fn run(&self) -> RunReport {
        self.run_for(koe_testkit::dispatching::short_run().window)
            .await
    }

    /// One run covering `window`.
    async fn run_for(&self, window: StdDuration) -> RunReport {
        let mut settings = koe_testkit::dispatching::short_run();
        settings.window = window;
        koe_testkit::dispatching::run_once(self.store.clone(), self.push.clone(), settings).await
    }

    fn throttled(&self, operation: &str) -> u64 {
        let stats = self.proxy.stats();
        stats
            .throttled_by_operation
            .get(operation)
            .copied()
            .unwrap_or(0)
    }

    /// Exactly one accepted push of `r`, `sent` in the store; its lateness.
    async fn pushed_once(&self, r: &Reservation) -> i64 {
        let sent = self.push.sent_for_call(r.call_id.as_str());
        assert_eq!(sent.len(), 1, "one push: {:#?}", self.push.attempts());
        assert!(sent[0].at >= r.scheduled_at.utc(), "never early");
        let stored = stored(&*self.store, r).await;
        assert_eq!(stored.status, ReservationStatus::Sent);
        (sent[0].at - r.scheduled_at.utc()).num_milliseconds()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_claim_is_made_again_by_its_run_and_pushed_once() {
    let w = World::new().await;
    let r = w.reserve("throttled-claim", 2_000).await;
    // The device's partition of the calls table is spent: its claim (and nothing else of this
    // run before it) is throttled.
    w.use_up(
        Target::base(&w.calls_table),
        r.device_id.as_str(),
        Capacity::Write,
        1_000.0,
    );
    w.pass_the_burst_after("UpdateItem", 1);
    let report = w.run().await;
    assert!(w.throttled("UpdateItem") >= 1, "the claim was throttled");
    let late = w.pushed_once(&r).await;
    // Made again by this run until answered, claimed and pushed by it, not left to a later run
    // (how late is printed: a busy machine changes it).
    assert!(
        report.store_retries >= 1 && report.resolved >= 1,
        "{report:?}"
    );
    assert_eq!(
        (report.claimed, report.sent, report.store_errors),
        (1, 1, 0),
        "{report:?}"
    );
    faults::record(
        "DynamoDB: the dispatch claim is throttled (its partition is spent)",
        "the run makes it again until answered: claimed and pushed once, by the same run",
        &format!(
            "{} throttled, pushed {late} ms after its second",
            w.throttled("UpdateItem")
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_throttled_by_index_back_pressure_is_retried_until_recorded() {
    let w = World::new().await;
    let r = w.reserve("throttled-finish", 2_000).await;
    // The call's index partition is spent: only the finish writes it (it removes the entry).
    let minute = r.scheduled_at.due_minute();
    w.use_up(
        Target::index(&w.calls_table, DUE_INDEX),
        &shard_key(&minute, 0),
        Capacity::Write,
        1_000.0,
    );
    // Capacity comes back only after every attempt of the first finish call failed, so the
    // dispatcher's own retry is what records it.
    w.pass_the_burst_after("UpdateItem", 3);
    let run = w.run().await;
    assert!(
        w.throttled("UpdateItem") >= 3,
        "every SDK attempt of the finish"
    );
    w.pushed_once(&r).await;
    assert_eq!((run.sent, run.store_errors), (1, 0), "{run:?}");
    // The run's metrics see it: the finish was refused for capacity, made again, answered.
    assert!(run.store_throttles >= 1, "{run:?}");
    assert!(run.store_retries >= 1 && run.resolved >= 1, "{run:?}");
    assert_eq!(run.unresolved, 0, "{run:?}");
    faults::record(
        "DynamoDB: the dispatch finish is throttled by its index partition (GSI back-pressure)",
        "the push went once; the dispatcher retries the finish with backoff until it is recorded",
        &format!(
            "{} throttled attempts; recorded sent",
            w.throttled("UpdateItem")
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_selection_is_made_again_by_the_next_reselection() {
    let w = World::new().await;
    let r = w.reserve("throttled-select", 2_500).await;
    let minute = r.scheduled_at.due_minute();
    // The shard's index partition has no read capacity left: the run's first query of it fails.
    w.use_up(
        Target::index(&w.calls_table, DUE_INDEX),
        &shard_key(&minute, 0),
        Capacity::Read,
        3_000.0,
    );
    w.pass_the_burst_after("Query", 1);
    let report = w.run().await;
    assert!(w.throttled("Query") >= 1, "the selection was throttled");
    let late = w.pushed_once(&r).await;
    // Found, claimed and pushed by this run, not left to a later one (how late is printed).
    assert_eq!(
        (report.selected, report.claimed, report.sent),
        (1, 1, 1),
        "{report:?}"
    );
    faults::record(
        "DynamoDB: the dispatcher's shard query is throttled (the index partition's reads are spent)",
        "the run's selection finds the call after the throttle; pushed once, by the same run",
        &format!(
            "{} throttled queries; pushed {late} ms after its second",
            w.throttled("Query")
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_shard_leaves_the_other_shards_of_its_minute_to_ring() {
    let w = World::new().await;
    // 70 calls due in a few seconds: their minute has 3 shards (32 a shard: the 33rd and the
    // 65th call ids raise its count by 32, no other does, so it counts as exactly as one a
    // call would). Far enough ahead that the first selection, which waits out the SDK's
    // retries of the throttled shard (up to the 3 s operation budget), still sees the others
    // in time.
    let mut calls = Vec::new();
    for i in 0..70 {
        let call_id = call_id_that_counts(i == 32 || i == 64);
        let name = format!("sharded-{i}");
        calls.push(reserve_soon_as(w.store.as_ref(), &name, 7_000, call_id).await);
    }
    let mut in_shard_0 = std::collections::HashSet::new();
    let mut minutes: Vec<String> = calls.iter().map(|r| r.scheduled_at.due_minute()).collect();
    minutes.dedup();
    for minute in &minutes {
        for call in w.store.due_calls(minute, 0).await.unwrap() {
            in_shard_0.insert(call.call_id.as_str().to_owned());
        }
        // Shard 0's index partition has no reads left for the whole run.
        w.use_up(
            Target::index(&w.calls_table, DUE_INDEX),
            &shard_key(minute, 0),
            Capacity::Read,
            3_000.0,
        );
    }
    assert!(!in_shard_0.is_empty() && in_shard_0.len() < calls.len());
    let last = calls.last().unwrap().scheduled_at.utc();
    let window = (last - Utc::now()).to_std().unwrap() + StdDuration::from_secs(1);
    let report = w.run_for(window).await;
    assert!(w.throttled("Query") >= 1);
    for r in &calls {
        let sent = w.push.sent_for_call(r.call_id.as_str());
        if in_shard_0.contains(r.call_id.as_str()) {
            assert!(sent.is_empty(), "shard 0 could not be read");
            let stored = w.store.get_reservation(&r.device_id, Utc::now()).await;
            assert_eq!(
                stored.unwrap().unwrap().status,
                ReservationStatus::Scheduled,
                "left for a later run"
            );
        } else {
            assert_eq!(sent.len(), 1, "the other shards' calls go out: {report:?}");
            // By this run, never early (how late a busy machine makes it is not asserted).
            assert!(sent[0].at >= r.scheduled_at.utc(), "never early: {sent:?}");
        }
    }
    assert_eq!(
        report.sent as usize,
        calls.len() - in_shard_0.len(),
        "{report:?}"
    );
    assert!(report.store_errors >= 1, "{report:?}");
    // DynamoDB's throttling answer, through the SDK, is told apart from other store errors.
    assert!(
        (1..=report.store_errors).contains(&report.store_throttles),
        "{report:?}"
    );
}
