//! A minute's count inflated straight in the table (issue 29): on DynamoDB Local, 10,000 added
//! to `due#<minute>` makes every selection of that minute query its 313 shards, but a run never
//! has more than `SELECTION_QUERIES_IN_FLIGHT` selection requests out at once, and the calls
//! due meanwhile, in that minute and the next, still leave once each from that run, never
//! early (how late is printed, not asserted: a busy machine changes it).
//!
//! The run is on the wall clock shifted to 2035 (`TokioClock`, not paused): it starts at
//! 00:00:52, its window (12 s, re-selected every 2 s, so the crowd is queried six times over)
//! covers the inflated minute 00:00 and the next. The store talks to DynamoDB Local through
//! the project's proxy (`reply_drop`), with the deployed client's timeouts, and the proxy
//! counts the selection's requests in flight as DynamoDB sees them. The figures are printed
//! (`--nocapture`) for docs/scale.md, "An inflated count".

use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use koe::dispatch::{Dispatcher, RunCause, SELECTION_QUERIES_IN_FLIGHT};
use koe::domain::due::{COUNT_STEP, raises_count, shards_for};
use koe::domain::reservation::{Reservation, minute_bucket};
use koe::platform::clock::Clock;
use koe::platform::config::{Config, Vars};
use koe::store::prelude::*;
use koe_testkit::clock::TokioClock;
use koe_testkit::dispatching::ProxiedWorld;
use koe_testkit::push::RecordingPushSender;

/// How much the count is inflated by: 10,000, or `KOE_BENCH_INFLATE_BY` (bench/inflated-count.sh
/// runs it with 1,000,000 too: the ceiling's 5,000 shards).
fn inflated_by() -> u32 {
    std::env::var("KOE_BENCH_INFLATE_BY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inflated_minute_is_queried_a_bounded_number_at_once_and_delays_no_call() {
    let world = ProxiedWorld::new().await;
    let store: Arc<dyn Store> = world.store.clone();
    let inflated_by = inflated_by();
    let clock = Arc::new(TokioClock::at(t("2035-03-01T00:00:52Z")));

    let crowded = minute_bucket(t("2035-03-01T00:00:00Z"));
    let reserve_for =
        |name: &'static str, at: &'static str| reserve(store.as_ref(), clock.as_ref(), name, at);
    let in_crowd = reserve_for("inflated-same", "2035-03-01T00:00:58Z").await;
    let next = reserve_for("inflated-next", "2035-03-01T00:01:00.500Z").await;
    koe_testkit::dynamodb::client()
        .await
        .update_item()
        .table_name(&world.tables.calls)
        .key("deviceId", AttributeValue::S(format!("due#{crowded}")))
        .update_expression("ADD #count :n")
        .expression_attribute_names("#count", "count")
        .expression_attribute_values(":n", AttributeValue::N(inflated_by.to_string()))
        .send()
        .await
        .expect("inflate the count");
    let count = store.due_count(&crowded).await.unwrap();
    // The crowd's own call counts 32 if its call id is one that counts.
    let counted = raises_count(&in_crowd.call_id);
    assert_eq!(count, inflated_by + if counted { COUNT_STEP } else { 0 });
    let shards = shards_for(count);
    if inflated_by == 10_000 {
        assert_eq!(shards, 313 + u32::from(counted));
    }

    // The selection's requests: the bucket-index queries and the minutes' count reads.
    let selection = world
        .dropper
        .watch(&[("Query", ""), ("GetItem", r#""S":"due#"#)]);
    let crowd = world
        .dropper
        .watch(&[("Query", &format!(r#""S":"{crowded}#"#))]);
    let mut settings = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    settings.window = StdDuration::from_secs(12);
    settings.reselect_every = StdDuration::from_secs(2);
    let push = Arc::new(RecordingPushSender::new(clock.clone()));
    let dispatcher = Dispatcher::new(store, push.clone(), clock.clone(), settings, "salt");
    let started = Instant::now();
    let report = dispatcher.run(RunCause::Local).await;

    let most = selection.most();
    let mut crowd_answered = crowd.answered();
    crowd_answered.sort();
    let crowd_queries = crowd_answered.len();
    let first_selection = *crowd_answered
        .get(shards as usize - 1)
        .expect("the crowd was queried whole at least once")
        - started;
    // How late each call's one push left (`None`: not pushed exactly once).
    let late = |r: &Reservation| {
        let sent = push.sent_for_call(r.call_id.as_str());
        (sent.len() == 1).then(|| (sent[0].at - r.scheduled_at.utc()).num_milliseconds())
    };
    let (late_same, late_next) = (late(&in_crowd), late(&next));
    println!(
        "inflated minute (count {count}, {shards} shards): first selection {} ms, \
         {crowd_queries} of its shard queries in the run, at most {most} selection requests in \
         flight (limit {}); lateness: same minute {late_same:?} ms, next minute {late_next:?} ms",
        first_selection.as_millis(),
        SELECTION_QUERIES_IN_FLIGHT,
    );
    assert!(most <= SELECTION_QUERIES_IN_FLIGHT, "{most} in flight");
    assert!(most > 1, "the watch saw the selection's requests at once");
    for (which, late) in [("same", late_same), ("next", late_next)] {
        let late = late.unwrap_or_else(|| panic!("{which} minute's call not pushed once"));
        assert!(late >= 0, "{which} minute's call never early: {late} ms");
    }
    assert_eq!((report.sent, report.store_errors), (2, 0), "{report:?}");
}

async fn reserve(store: &dyn Store, clock: &dyn Clock, name: &str, at: &str) -> Reservation {
    let at = DateTime::parse_from_rfc3339(at).unwrap();
    let token = format!("{:064x}", fastrand::u128(..));
    koe_testkit::dispatching::reserve_at(store, name, &token, at, clock.now()).await
}
