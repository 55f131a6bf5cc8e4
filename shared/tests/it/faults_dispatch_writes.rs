//! The dispatcher's own writes failing on DynamoDB Local (through `reply_drop`'s proxy, with the
//! production-like client: deployed timeouts, the SDK's standard retries): an outcome whose
//! write failed is retried until it is recorded, and a push whose "started" mark could not be
//! written is not sent by that run, but by a later one, once.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use koe::clock::{Clock, SystemClock};
use koe::dispatch::RunReport;
use koe::domain::reservation::{Reservation, ReservationStatus};
use koe::store::Store;
use koe::store::dynamodb::DynamoStore;
use koe_testkit::dynamodb::{self, reply_drop::ReplyDropper};
use koe_testkit::faults;
use koe_testkit::push::RecordingPushSender;

const CLAIM_TIMEOUT: StdDuration = StdDuration::from_secs(4);
/// What a finish request's body holds (its token), and a mark's.
const FINISH: &str = "finishToken";
const MARK: &str = "SET #pushStartedAtMs";

struct World {
    store: Arc<DynamoStore>,
    dropper: ReplyDropper,
    push: Arc<RecordingPushSender>,
}

impl World {
    async fn new() -> World {
        let upstream = tokio::task::spawn_blocking(dynamodb::endpoint)
            .await
            .unwrap();
        let dropper = ReplyDropper::start(&upstream).await;
        let setup = dynamodb::client().await;
        let tables = dynamodb::create_tables(&setup, &dynamodb::random_prefix()).await;
        let client = dynamodb::production_like_client(&dropper.endpoint());
        World {
            store: Arc::new(DynamoStore::new(client, tables)),
            dropper,
            push: Arc::new(RecordingPushSender::new(Arc::new(SystemClock))),
        }
    }

    async fn reserve(&self, name: &str, in_ms: i64) -> Reservation {
        koe_testkit::dispatching::reserve_soon(self.store.as_ref(), name, in_ms).await
    }

    /// One run (3 s window, re-selection every 500 ms, 4 s claim timeout), to its end.
    async fn run(&self) -> RunReport {
        let mut settings = koe_testkit::dispatching::short_run();
        settings.claim_timeout = CLAIM_TIMEOUT;
        koe_testkit::dispatching::run_once(self.store.clone(), self.push.clone(), settings).await
    }

    async fn stored(&self, r: &Reservation) -> Reservation {
        self.store
            .get_reservation(&r.device_id, SystemClock.now())
            .await
            .unwrap()
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_the_store_refused_is_retried_until_it_is_recorded() {
    let w = World::new().await;
    let r = w.reserve("finish-refused", 1500).await;
    // Every attempt the SDK makes of the first finish gets a 500: the call returns an error.
    w.dropper.refuse_requests("UpdateItem", FINISH, 3);
    let report = w.run().await;
    assert_eq!(w.dropper.dropped(), 3, "the first finish failed");
    assert_eq!(w.push.sent_for_call(r.call_id.as_str()).len(), 1);
    assert_eq!(
        w.stored(&r).await.status,
        ReservationStatus::Sent,
        "recorded by the dispatcher's retry (left `claimed` without it)"
    );
    assert_eq!((report.sent, report.store_errors), (1, 0), "{report:?}");
    faults::record(
        "DynamoDB: every attempt of a dispatch outcome's write fails (500)",
        "the dispatcher retries it with backoff (up to 10 s): recorded sent, one push",
        "first finish failed after 3 SDK attempts; recorded sent by the retry",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_written_though_every_reply_was_lost_counts_as_recorded() {
    let w = World::new().await;
    let r = w.reserve("finish-lost", 1500).await;
    // The write happens, but no attempt's reply arrives: the call errs, the retry is refused
    // (the record is no longer `claimed`), and the record shows it was written.
    w.dropper.drop_replies("UpdateItem", FINISH, 3);
    let report = w.run().await;
    assert_eq!(w.dropper.dropped(), 3);
    assert_eq!(w.stored(&r).await.status, ReservationStatus::Sent);
    assert_eq!((report.sent, report.store_errors), (1, 0), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_whose_start_could_not_be_marked_is_left_to_a_later_run_and_sent_once() {
    let w = World::new().await;
    let r = w.reserve("mark-refused", 1500).await;
    w.dropper.refuse_requests("UpdateItem", MARK, 3);
    let first = w.run().await;
    assert!(
        w.push.attempts().is_empty(),
        "no push without the mark: {:#?}",
        w.push.attempts()
    );
    assert_eq!((first.claimed, first.store_errors), (1, 1), "{first:?}");
    let left = w.stored(&r).await;
    assert_eq!(
        (left.status, left.push_started_at),
        (ReservationStatus::Claimed, None)
    );

    // Past the claim timeout the next run re-claims and sends it (within grace).
    tokio::time::sleep(CLAIM_TIMEOUT).await;
    let second = w.run().await;
    assert_eq!(w.push.sent_for_call(r.call_id.as_str()).len(), 1);
    assert_eq!(w.push.attempts().len(), 1, "one push in all");
    assert_eq!(w.stored(&r).await.status, ReservationStatus::Sent);
    assert_eq!(second.sent, 1, "{second:?}");
    faults::record(
        "DynamoDB: the write marking a push as started fails (500, every attempt)",
        "that run does not push; the next run after the claim timeout re-claims and sends it once",
        "first run: claimed, no push, 1 store error; second run: sent once",
    );
}
