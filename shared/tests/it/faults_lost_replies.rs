//! Lost replies on DynamoDB Local: a proxy (`koe_testkit::dynamodb::reply_drop`) lets DynamoDB
//! carry out a write, then closes the connection unanswered. The production-like client (the
//! deployed timeouts, the SDK's standard retries) retries the same request, whose condition
//! now meets the item its first attempt wrote. A claim must still be won (or the call would
//! ring late, after the claim timeout, by a recovering run), a finish still done, a create
//! still created (not 409 for the app's own reservation), a cancel still cancelled (not 404),
//! a counter (the agent's daily limit, plan answers, token counts) still counted once.

use chrono::{Duration, Utc};
use koe::domain::device::DeviceId;
use koe::domain::reservation::{Reservation, ReservationStatus, ScheduledAt};
use koe::store::Outcome;
use koe::store::Store;
use koe::store::dynamodb::DynamoStore;
use koe_testkit::dynamodb::{self, reply_drop::ReplyDropper};
use koe_testkit::faults;

/// A store whose client talks to DynamoDB Local through the dropper (tables made directly).
async fn store_behind_a_dropper() -> (DynamoStore, ReplyDropper) {
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

fn updates(dropper: &ReplyDropper, operation: &str) -> usize {
    dropper
        .operations()
        .iter()
        .filter(|o| o.as_str() == operation)
        .count()
}

#[tokio::test]
async fn a_claim_whose_reply_is_lost_is_still_won() {
    let (store, dropper) = store_behind_a_dropper().await;
    let r = reservation("lost-reply-claim");
    let now = Utc::now();
    store
        .create_reservation(&r, now, now - Duration::minutes(5))
        .await
        .unwrap();
    dropper.drop_replies("UpdateItem", "claimToken", 1);
    let won = store
        .claim_reservation(&r.device_id, &r.call_id, now, now - Duration::seconds(30))
        .await
        .unwrap();
    assert_eq!(dropper.dropped(), 1);
    assert!(updates(&dropper, "UpdateItem") >= 2, "the SDK retried");
    assert!(
        won,
        "the retry of a claim that was written is recognised as won"
    );
    let stored = store
        .get_reservation(&r.device_id, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.status, ReservationStatus::Claimed);
    // Another caller's claim (its own token) is still refused.
    assert!(
        !store
            .claim_reservation(&r.device_id, &r.call_id, now, now - Duration::seconds(30))
            .await
            .unwrap()
    );
    faults::record(
        "DynamoDB: the reply to a dispatch claim is lost (the write happened)",
        "the SDK's retry is recognised as the won claim: the call rings on time, once",
        &format!(
            "claim won after {} UpdateItem requests; a second claimer refused",
            updates(&dropper, "UpdateItem") - 1
        ),
    );
}

#[tokio::test]
async fn a_finish_whose_reply_is_lost_is_still_done_once() {
    let (store, dropper) = store_behind_a_dropper().await;
    let r = reservation("lost-reply-finish");
    let now = Utc::now();
    store
        .create_reservation(&r, now, now - Duration::minutes(5))
        .await
        .unwrap();
    let abandoned = now - Duration::seconds(30);
    assert!(
        store
            .claim_reservation(&r.device_id, &r.call_id, now, abandoned)
            .await
            .unwrap()
    );
    dropper.drop_replies("UpdateItem", "finishToken", 1);
    let done = store
        .finish_reservation(&r.device_id, &r.call_id, Outcome::Sent, now, abandoned)
        .await
        .unwrap();
    assert_eq!(dropper.dropped(), 1);
    assert!(
        done,
        "the retry of a finish that was written is recognised as done"
    );
    let stored = store
        .get_reservation(&r.device_id, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.status, ReservationStatus::Sent);
    // A second finish (another call of it) is still refused.
    assert!(
        !store
            .finish_reservation(&r.device_id, &r.call_id, Outcome::Failed, now, abandoned)
            .await
            .unwrap()
    );
    faults::record(
        "DynamoDB: the reply to a dispatch finish is lost (the write happened)",
        "the retry is recognised as done: recorded sent once, a second finish refused",
        "finish done; status sent; a second finish refused",
    );
}

#[tokio::test]
async fn a_create_whose_reply_is_lost_is_still_created() {
    let (store, dropper) = store_behind_a_dropper().await;
    let r = reservation("lost-reply-create");
    let now = Utc::now();
    dropper.drop_replies("PutItem", "scheduledAtMs", 1);
    store
        .create_reservation(&r, now, now - Duration::minutes(5))
        .await
        .expect("the retry of a create that was written is not 'exists'");
    assert_eq!(dropper.dropped(), 1);
    let stored = store
        .get_reservation(&r.device_id, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.call_id, r.call_id);
    // Another reservation for the device is still refused while this one holds the slot.
    let other = reservation("lost-reply-create");
    assert!(
        store
            .create_reservation(&other, now, now - Duration::minutes(5))
            .await
            .is_err()
    );
    faults::record(
        "DynamoDB: the reply to POST /calls' create is lost (the write happened)",
        "the retry is recognised as this reservation: 201, not 409 for the app's own call",
        "created once; another reservation for the device still refused",
    );
}

#[tokio::test]
async fn a_cancel_whose_reply_is_lost_is_still_cancelled() {
    let (store, dropper) = store_behind_a_dropper().await;
    let r = reservation("lost-reply-cancel");
    let now = Utc::now();
    store
        .create_reservation(&r, now, now - Duration::minutes(5))
        .await
        .unwrap();
    dropper.drop_replies("DeleteItem", "scheduled", 1);
    store
        .cancel_reservation(&r.device_id, now)
        .await
        .expect("the retry of a cancel that was carried out is not 'not found'");
    assert_eq!(dropper.dropped(), 1);
    assert_eq!(updates(&dropper, "DeleteItem"), 2, "one lost, one retried");
    assert_eq!(
        store.get_reservation(&r.device_id, now).await.unwrap(),
        None
    );
    // Without a reservation, a cancel is still "not found".
    assert!(matches!(
        store.cancel_reservation(&r.device_id, now).await,
        Err(koe::store::CancelError::NotFound)
    ));
    faults::record(
        "DynamoDB: the reply to DELETE /calls' delete is lost (the delete happened)",
        "the retry after an unanswered attempt finds no item and counts it as this cancel: 204, not 404",
        "cancelled; a later cancel of nothing still not found",
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
