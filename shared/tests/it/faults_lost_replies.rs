//! Lost replies on DynamoDB Local: a proxy (`koe_testkit::dynamodb::reply_drop`) lets DynamoDB
//! carry out a write, then closes the connection unanswered. The production-like client (the
//! deployed timeouts, the SDK's standard retries) retries the same request, whose condition
//! now meets the item its first attempt wrote; the dispatcher's writes on a call are made once
//! by the client and again by the dispatcher with its run's token. A claim must still be won
//! (or the call would ring late, after the claim timeout, by a recovering run), a finish still
//! done, a create still created (not 409 for the app's own reservation), a cancel still
//! cancelled (not 404), a counter (the agent's daily limit, plan answers, token counts) still
//! counted once.

use chrono::{DateTime, Duration, Utc};
use koe::domain::device::DeviceId;
use koe::domain::due::COUNT_STEP;
use koe::domain::reservation::{Reservation, ReservationStatus, RunToken, ScheduledAt};
use koe::store::dynamodb::DynamoStore;
use koe::store::prelude::*;
use koe::store::{CancelError, CreateError, Created, Outcome, StoreError};
use koe_testkit::dynamodb::{self, reply_drop::ReplyDropper};
use koe_testkit::faults;

use crate::count_estimate::call_id_that_counts;
use crate::store_contract::missed_before;

/// A store whose client talks to DynamoDB Local through the dropper (tables made directly).
pub(super) async fn store_behind_a_dropper() -> (DynamoStore, ReplyDropper) {
    let upstream = tokio::task::spawn_blocking(dynamodb::endpoint)
        .await
        .unwrap();
    let dropper = ReplyDropper::start(&upstream).await;
    let setup = dynamodb::client().await;
    let tables = dynamodb::create_tables(&setup, &dynamodb::random_prefix()).await;
    let client = dynamodb::production_like_client(&dropper.endpoint());
    (DynamoStore::new(client, tables), dropper)
}

fn reservation(device: &str) -> Reservation {
    let now = Utc::now();
    let at = (now + Duration::seconds(30)).to_rfc3339();
    Reservation::new(
        DeviceId::parse("deviceId", device).unwrap(),
        ScheduledAt::parse("scheduledAt", &at, now).unwrap(),
        None,
        now,
    )
}

/// Creates `r` at `now` (a reservation older than five minutes would be stale).
async fn create(
    store: &DynamoStore,
    r: &Reservation,
    now: DateTime<Utc>,
) -> Result<Created, CreateError> {
    store
        .create_reservation(r, now, now - Duration::minutes(5))
        .await
}

/// A reservation for `device` created (its reply not lost), and the time it was made.
async fn created(store: &DynamoStore, device: &str) -> (Reservation, DateTime<Utc>) {
    let r = reservation(device);
    let now = Utc::now();
    create(store, &r, now).await.unwrap();
    (r, now)
}

/// The reservation of `r`'s device as the store holds it at `now`.
async fn stored(store: &DynamoStore, r: &Reservation, now: DateTime<Utc>) -> Reservation {
    let stored = store.get_reservation(&r.device_id, now).await.unwrap();
    stored.expect("the reservation is stored")
}

/// `run`'s claim of `r` at `now`.
async fn claim(
    store: &DynamoStore,
    r: &Reservation,
    run: &RunToken,
    now: DateTime<Utc>,
    abandoned_before: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let (device, call) = (&r.device_id, &r.call_id);
    store
        .claim_reservation(device, call, run, now, abandoned_before)
        .await
}

fn updates(dropper: &ReplyDropper, operation: &str) -> usize {
    dropper
        .operations()
        .iter()
        .filter(|o| o.as_str() == operation)
        .count()
}

#[tokio::test]
async fn a_claim_whose_reply_is_lost_is_won_when_its_run_makes_it_again() {
    let (store, dropper) = store_behind_a_dropper().await;
    let (r, now) = created(&store, "lost-reply-claim").await;
    let run = RunToken::generate();
    let abandoned = now - Duration::seconds(30);
    dropper.drop_replies("UpdateItem", "claimToken", 1);
    let before = updates(&dropper, "UpdateItem");
    let first = claim(&store, &r, &run, now, abandoned).await;
    assert!(first.is_err(), "no answer: {first:?}");
    assert_eq!(dropper.dropped(), 1);
    assert_eq!(
        updates(&dropper, "UpdateItem") - before,
        1,
        "one attempt (the dispatcher makes it again, not the SDK)"
    );
    // Another run's claim (its own token) is refused: the lost write happened.
    assert!(
        !claim(&store, &r, &RunToken::generate(), now, abandoned)
            .await
            .unwrap()
    );
    let again = now + Duration::milliseconds(600);
    assert!(
        claim(&store, &r, &run, again, abandoned).await.unwrap(),
        "made again by its run, a claim that was written is recognised as won"
    );
    let stored = stored(&store, &r, again).await;
    assert_eq!(
        (stored.status, stored.claimed_by),
        (ReservationStatus::Claimed, Some(run))
    );
    faults::record(
        "DynamoDB: the reply to a dispatch claim is lost (the write happened)",
        "the run makes it again with its token: recognised as its own claim, another run refused",
        "claim lost once; another run refused; the same run's second attempt won",
    );
}

#[tokio::test]
async fn a_finish_whose_reply_is_lost_is_done_once_when_its_run_makes_it_again() {
    let (store, dropper) = store_behind_a_dropper().await;
    let (r, now) = created(&store, "lost-reply-finish").await;
    let abandoned = now - Duration::seconds(30);
    let run = RunToken::generate();
    assert!(claim(&store, &r, &run, now, abandoned).await.unwrap());
    dropper.drop_replies("UpdateItem", "finishToken", 1);
    let finish = |outcome, run| {
        let (store, r) = (&store, &r);
        async move {
            store
                .finish_reservation(&r.device_id, &r.call_id, outcome, run, now, abandoned)
                .await
        }
    };
    assert!(finish(Outcome::Sent, &run).await.is_err(), "no answer");
    assert_eq!(dropper.dropped(), 1);
    assert!(
        finish(Outcome::Sent, &run).await.unwrap(),
        "made again by its run, a finish that was written is recognised as done"
    );
    let stored = stored(&store, &r, now).await;
    assert_eq!(stored.status, ReservationStatus::Sent);
    // Another outcome, by this run or another, is still refused.
    assert!(!finish(Outcome::Failed, &run).await.unwrap());
    assert!(!finish(Outcome::Sent, &RunToken::generate()).await.unwrap());
    faults::record(
        "DynamoDB: the reply to a dispatch finish is lost (the write happened)",
        "the run makes it again with its token: recognised as done; other outcomes refused",
        "finish lost once; made again: done; status sent; a second outcome refused",
    );
}

#[tokio::test]
async fn a_create_whose_reply_is_lost_is_still_created() {
    let (store, dropper) = store_behind_a_dropper().await;
    let r = reservation("lost-reply-create");
    let now = Utc::now();
    dropper.drop_replies("PutItem", "scheduledAtMs", 1);
    create(&store, &r, now)
        .await
        .expect("the retry of a create that was written is not 'exists'");
    assert_eq!(dropper.dropped(), 1);
    let stored = stored(&store, &r, now).await;
    assert_eq!(stored.call_id, r.call_id);
    // Another reservation for the device is still refused while this one holds the slot.
    let other = reservation("lost-reply-create");
    assert!(create(&store, &other, now).await.is_err());
    faults::record(
        "DynamoDB: the reply to POST /calls' create is lost (the write happened)",
        "the retry is recognised as this reservation: 201, not 409 for the app's own call",
        "created once; another reservation for the device still refused",
    );
}

/// POST /calls' two writes (the reservation, then its minute's count: a call id that counts,
/// one in 32) with every reply lost: the create is still answered as created, and counted once
/// (a reservation in a shard the count does not cover would never ring).
#[tokio::test]
async fn a_create_whose_every_reply_is_lost_is_created_and_counted_once() {
    let (store, dropper) = store_behind_a_dropper().await;
    let mut r = reservation("lost-create-all");
    r.call_id = call_id_that_counts(true);
    let now = Utc::now();
    // The put's first attempt is carried out, its reply lost, the SDK's retries lost on the way;
    // the count's reply is lost too (its retry meets its own token).
    dropper.drop_replies("PutItem", "scheduledAtMs", 1);
    dropper.refuse_requests("PutItem", "scheduledAtMs", 2);
    dropper.drop_replies("UpdateItem", "lastCallId", 1);
    create(&store, &r, now)
        .await
        .expect("a create that was written is created, whatever became of its replies");
    assert_eq!(dropper.dropped(), 4);
    let stored = stored(&store, &r, now).await;
    assert_eq!(stored.call_id, r.call_id);
    let minute = r.scheduled_at.due_minute();
    assert_eq!(
        store.due_count(&minute).await.unwrap(),
        COUNT_STEP,
        "the count's retried ADD is recognised by its callId: counted once"
    );
    // The same reservation sent again by a client retry: created, still counted once.
    create(&store, &r, now).await.unwrap();
    assert_eq!(store.due_count(&minute).await.unwrap(), COUNT_STEP);
    assert!(
        store
            .due_calls(&minute, 0)
            .await
            .unwrap()
            .iter()
            .any(|c| c.call_id == r.call_id),
        "in a shard the count covers"
    );
    faults::record(
        "DynamoDB: every reply of POST /calls' put and count is lost (both written)",
        "the put read back, the count's ADD recognised by its callId: created, counted once",
        "created; count 32 (also after the same create again); in shard 0",
    );
}

/// A minute's first create, with no count yet and a call id that does not count, whose every
/// reply is lost: read back and created, the minute still without a count, and the call in
/// shard 0, which a run queries whatever the count says.
#[tokio::test]
async fn a_minutes_first_create_whose_reply_is_lost_is_in_shard_0_without_a_count() {
    let (store, dropper) = store_behind_a_dropper().await;
    let mut r = reservation("lost-first-create");
    r.call_id = call_id_that_counts(false);
    let now = Utc::now();
    dropper.drop_replies("PutItem", "scheduledAtMs", 1);
    dropper.refuse_requests("PutItem", "scheduledAtMs", 2);
    create(&store, &r, now)
        .await
        .expect("a create that was written is created, whatever became of its replies");
    assert_eq!(dropper.dropped(), 3);
    assert_eq!(stored(&store, &r, now).await.call_id, r.call_id);
    let minute = r.scheduled_at.due_minute();
    assert_eq!(store.due_count(&minute).await.unwrap(), 0, "no count");
    create(&store, &r, now).await.unwrap();
    assert_eq!(
        store.due_count(&minute).await.unwrap(),
        0,
        "a retry counts nothing"
    );
    let listed = store.due_calls(&minute, 0).await.unwrap();
    assert_eq!(
        listed.iter().map(|c| &c.call_id).collect::<Vec<_>>(),
        [&r.call_id],
        "in shard 0"
    );
    faults::record(
        "DynamoDB: every reply of a minute's first create is lost (no count yet)",
        "read back: created in shard 0, which every run queries without a count",
        "created; count 0 (also after the same create again); listed in shard 0",
    );
}

#[tokio::test]
async fn a_cancel_whose_reply_is_lost_is_still_cancelled() {
    let (store, dropper) = store_behind_a_dropper().await;
    let (r, now) = created(&store, "lost-reply-cancel").await;
    dropper.drop_replies("TransactWriteItems", "cancelled", 1);
    let before = updates(&dropper, "TransactWriteItems");
    store
        .cancel_reservation(&r.device_id, None, now, missed_before(now))
        .await
        .expect("the retry of a cancel that was carried out is not 'not found'");
    assert_eq!(dropper.dropped(), 1);
    assert_eq!(
        updates(&dropper, "TransactWriteItems") - before,
        2,
        "one lost, one retried (and met its own cancelled record)"
    );
    assert!(store.was_cancelled(&r.call_id, now).await.unwrap());
    assert_eq!(
        store.get_reservation(&r.device_id, now).await.unwrap(),
        None
    );
    // Without a reservation, a cancel is still "not found".
    assert!(matches!(
        store
            .cancel_reservation(&r.device_id, None, now, missed_before(now))
            .await,
        Err(CancelError::NotFound)
    ));
    faults::record(
        "DynamoDB: the reply to DELETE /calls' cancel is lost (the cancel happened)",
        "the retry meets the record it cancelled (same callId, cancelled): 204, not 404",
        "cancelled; a later cancel of nothing still not found",
    );
}

/// The cancel and its tombstone are written together or not at all: a tombstone DynamoDB
/// refuses leaves the reservation `scheduled` and the cancel a store error (503: the app sends
/// it again), never a 204 without a tombstone; cancelled then, the call never comes back, even
/// after a newer reservation replaced its record and ended, more than a day later.
#[tokio::test]
async fn a_cancel_whose_tombstone_is_refused_cancels_nothing() {
    let (store, dropper) = store_behind_a_dropper().await;
    let (r, now) = created(&store, "refused-tombstone").await;
    dropper.refuse_requests("", "cancelled#", 10);
    let refused = store
        .cancel_reservation(&r.device_id, Some(&r.call_id), now, missed_before(now))
        .await;
    dropper.clear();
    assert!(
        matches!(refused, Err(CancelError::Store(_))),
        "no tombstone, no cancel: {refused:?}"
    );
    assert!(!store.was_cancelled(&r.call_id, now).await.unwrap());
    assert_eq!(
        stored(&store, &r, now).await.status,
        ReservationStatus::Scheduled,
        "neither written"
    );

    // The app's DELETE again: both written.
    let again = now + Duration::seconds(1);
    store
        .cancel_reservation(&r.device_id, Some(&r.call_id), again, missed_before(again))
        .await
        .expect("cancelled");
    // A newer reservation replaces the record and ends; more than a day later the keyed
    // retry of the cancelled create (its kept answer gone) still finds the tombstone.
    let newer = reservation("refused-tombstone");
    create(&store, &newer, again).await.unwrap();
    let run = RunToken::generate();
    let due = newer.scheduled_at.utc();
    assert!(
        claim(&store, &newer, &run, due, due - Duration::seconds(30))
            .await
            .unwrap()
    );
    let (device, call) = (&newer.device_id, &newer.call_id);
    let finish = store.finish_reservation(device, call, Outcome::Sent, &run, due, due);
    assert!(finish.await.unwrap());
    let day_later = now + Duration::hours(25);
    assert!(
        store.was_cancelled(&r.call_id, day_later).await.unwrap(),
        "the keyed retry is 409 RESERVATION_GONE, the call does not come back"
    );
    faults::record(
        "DynamoDB: the cancel's tombstone write is refused",
        "one transaction: neither written, 503; the cancel again writes both",
        "still scheduled, no tombstone; then cancelled, its tombstone outlives a newer reservation",
    );
}

#[tokio::test]
async fn a_count_whose_reply_is_lost_is_counted_once() {
    let (store, dropper) = store_behind_a_dropper().await;
    let device = DeviceId::parse("deviceId", "lost-reply-count").unwrap();
    let expire_at = (Utc::now() + Duration::days(8)).timestamp();
    dropper.drop_replies("UpdateItem", "lastAdd", 1);
    let first = store
        .count_agent_use(&device, "2035-03-01", 50, expire_at)
        .await
        .unwrap();
    assert_eq!(dropper.dropped(), 1);
    assert_eq!(updates(&dropper, "UpdateItem"), 2, "one lost, one retried");
    assert_eq!(
        first,
        koe::store::UsageOutcome::Counted { count: 1 },
        "the retry reads the count its first attempt left, it does not add again"
    );
    let second = store
        .count_agent_use(&device, "2035-03-01", 50, expire_at)
        .await
        .unwrap();
    assert_eq!(second, koe::store::UsageOutcome::Counted { count: 2 });
    faults::record(
        "DynamoDB: the reply to the agent's daily count is lost (the ADD happened)",
        "the retry recognises its own ADD: counted once, not twice",
        "first call counted 1 (after its retry), the next 2",
    );
}

/// The app on `store` (its requests through the dropper), and a PUT /devices body's token.
async fn app_on(store: DynamoStore) -> (koe_testkit::harness::TestApp, String) {
    let store = std::sync::Arc::new(store);
    let app = koe_testkit::harness::spawn_app_with(&[], |app| app.with_store(store)).await;
    (app, "ab".repeat(32))
}

/// After `secret` (the device's last answered one) is proven, a PUT /devices without it is
/// refused: the device is protected.
async fn protected_by(app: &koe_testkit::harness::TestApp, device: &str, secret: &str) {
    let token = "cd".repeat(32);
    let proven = app.put_device(device, &token, Some(secret)).await;
    assert!(proven.get("deviceSecret").is_none());
    let body = serde_json::json!({"deviceId": device, "voipToken": token});
    let put = app
        .agent(http::Method::PUT, "/devices")
        .body(body.to_string());
    let response = koe_testkit::harness::send(put).await;
    koe_testkit::harness::error_body(response, 403, "DEVICE_SECRET_REQUIRED").await;
}

#[tokio::test]
async fn a_first_registration_whose_reply_is_lost_still_answers_its_secret() {
    let (store, dropper) = store_behind_a_dropper().await;
    let (app, token) = app_on(store).await;
    dropper.drop_replies("PutItem", "secretHash", 1);
    let secret = app.register_device("lost-reply-register", &token).await;
    assert_eq!(dropper.dropped(), 1);
    assert_eq!(updates(&dropper, "PutItem"), 2, "one lost, one retried");
    protected_by(&app, "lost-reply-register", &secret).await;
    faults::record(
        "DynamoDB: the reply to a device's first PUT /devices is lost (the write happened)",
        "the retry recognises its own secret: 200 with the deviceSecret it stored",
        "200 with deviceSecret; presented, it proves the device; then a PUT without it 403",
    );
}

#[tokio::test]
async fn a_device_whose_secret_was_never_delivered_gets_a_new_one() {
    let (store, dropper) = store_behind_a_dropper().await;
    let (app, token) = app_on(store).await;
    // Written, its reply lost and the SDK's retries refused: the answer never reaches the app.
    dropper.drop_replies("PutItem", "secretHash", 1);
    dropper.refuse_requests("PutItem", "secretHash", 2);
    let body = serde_json::json!({"deviceId": "never-delivered", "voipToken": token});
    let put = app
        .agent(http::Method::PUT, "/devices")
        .body(body.to_string());
    let failed = koe_testkit::harness::send(put).await;
    assert_eq!(failed.status().as_u16(), 503, "no answer with the secret");
    assert_eq!(dropper.dropped(), 3);
    // The app registers again: its unproven secret is replaced by one it is given.
    let secret = app.register_device("never-delivered", &token).await;
    protected_by(&app, "never-delivered", &secret).await;
    faults::record(
        "DynamoDB: a device's first PUT /devices is written but never answered",
        "the next PUT without a secret replaces the unproven one: 200 with a new deviceSecret",
        "503, then 200 with deviceSecret; presented, it proves the device; then without it 403",
    );
}
