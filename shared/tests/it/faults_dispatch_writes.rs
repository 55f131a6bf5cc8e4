//! The dispatcher's own writes failing on DynamoDB Local (through `reply_drop`'s proxy, with the
//! production-like client): an outcome whose write failed is retried until it is recorded, and
//! a push whose "started" mark was refused (its batch's, for a device without `confirmsCalls`;
//! its own, for one that confirms) is made again by its run and sent, once.
//! `faults_slow_replies` holds replies back instead.

use std::time::Duration as StdDuration;

use koe::dispatch::RunReport;
use koe::domain::reservation::{Reservation, ReservationStatus};
use koe_testkit::dispatching::ProxiedWorld as World;
use koe_testkit::dynamodb::reply_drop::ReplyDropper;
use koe_testkit::faults;
use koe_testkit::push::RecordedPush;

const CLAIM_TIMEOUT: StdDuration = StdDuration::from_secs(4);
/// What a finish request's body holds (its token), a mark's (its own write, for a device that
/// confirms its calls), and a batch's mark.
const FINISH: &str = "finishToken";
const MARK: &str = "SET #pushStartedAtMs";
const BATCH_MARK: &str = "SET #markedAtMs";

/// A fresh world with one call 1.5 s away, its proxy's fault set by `fault`, and one run.
async fn one_run(name: &str, fault: impl FnOnce(&ReplyDropper)) -> (World, Reservation, RunReport) {
    let w = World::new().await;
    let r = w.reserve(name, 1500).await;
    fault(&w.dropper);
    let report = w.run(CLAIM_TIMEOUT).await;
    (w, r, report)
}

/// Three refused attempts of a push mark, then `r`'s call pushed once by the same run (its
/// report counts the claim and the push: a run that left it to the next would show neither),
/// never before its second, the report clean: the pushes, and how late (ms) the push was (a
/// figure, not asserted: a busy machine changes it; `bench/slow-replies.sh` measures it).
fn pushed_once_by_the_same_run(
    w: &World,
    r: &Reservation,
    report: &RunReport,
) -> (Vec<RecordedPush>, i64) {
    assert_eq!(w.dropper.dropped(), 3);
    let pushes = w.push.sent_for_call(r.call_id.as_str());
    assert_eq!(pushes.len(), 1, "{pushes:#?}");
    let late = (pushes[0].at - r.scheduled_at.utc()).num_milliseconds();
    assert!(late >= 0, "never early: {late} ms");
    assert_eq!(
        (
            report.claimed,
            report.sent,
            report.store_errors,
            report.resolved
        ),
        (1, 1, 0, 1),
        "{report:?}"
    );
    (pushes, late)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_the_store_refused_is_retried_until_it_is_recorded() {
    // The first three attempts of the finish get a 500 (nothing written).
    let (w, r, report) = one_run("finish-refused", |d| {
        d.refuse_requests("UpdateItem", FINISH, 3)
    })
    .await;
    assert_eq!(w.dropper.dropped(), 3, "the first finish failed");
    assert_eq!(w.push.sent_for_call(r.call_id.as_str()).len(), 1);
    assert_eq!(
        w.stored(&r).await.status,
        ReservationStatus::Sent,
        "recorded by the dispatcher's retry (left `claimed` without it)"
    );
    assert_eq!(
        (report.sent, report.store_errors, report.resolved),
        (1, 0, 1),
        "{report:?}"
    );
    faults::record(
        "DynamoDB: a dispatch outcome's write fails (500, three attempts)",
        "the dispatcher retries it with backoff (up to 10 s): recorded sent, one push",
        "three attempts refused; recorded sent by the fourth",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_written_though_every_reply_was_lost_counts_as_recorded() {
    // The write happens, but the first three attempts' replies never arrive: the next attempt
    // meets this run's own outcome (its token) and is answered as written.
    let (w, r, report) = one_run("finish-lost", |d| d.drop_replies("UpdateItem", FINISH, 3)).await;
    assert_eq!(w.dropper.dropped(), 3);
    assert_eq!(w.stored(&r).await.status, ReservationStatus::Sent);
    assert_eq!((report.sent, report.store_errors), (1, 0), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_mark_the_store_refused_is_made_again_by_its_run_and_sent_once() {
    // A device without `confirmsCalls`: three attempts of its batch's mark, at the second, get
    // a 500 (nothing written); the run makes it again.
    let (w, r, report) = one_run("mark-refused", |d| {
        d.refuse_requests("UpdateItem", BATCH_MARK, 3)
    })
    .await;
    let (_, late) = pushed_once_by_the_same_run(&w, &r, &report);
    assert_eq!(w.push.attempts().len(), 1, "one push in all");
    assert_eq!(w.stored(&r).await.status, ReservationStatus::Sent);
    faults::record(
        "DynamoDB: the write marking a push as started (its batch's) fails (500, three attempts)",
        "the run makes it again until answered, then pushes: one push, in the same run",
        &format!("sent once, {late} ms late; 0 store errors"),
    );
}

/// A device that confirms its calls: its push mark is a write of its own, and three attempts of
/// it get a 500 (nothing written); the run makes it again and pushes, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_mark_apart_the_store_refused_is_made_again_by_its_run_and_pushed_once() {
    let w = World::new().await;
    let r = w.reserve_confirming("mark-apart-refused", 1500).await;
    w.dropper.refuse_requests("UpdateItem", MARK, 3);
    let report = w.run(CLAIM_TIMEOUT).await;
    let (pushes, _) = pushed_once_by_the_same_run(&w, &r, &report);
    assert_eq!(pushes[0].payload["attempt"], 1);
    let stored = w.stored(&r).await;
    assert_eq!(
        (stored.status, stored.pushes),
        (ReservationStatus::Scheduled, 1),
        "due again, waiting for its confirmation"
    );
}
