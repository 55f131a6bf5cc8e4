//! The missed-call notice's release (docs/dispatch.md, "Missed-call notice"): a notice whose
//! every push surely failed is given back by the run that holds it, and the call is back in its
//! minute's index entry, due at the retry time, until a run claims the notice again.

use chrono::{DateTime, Utc};
use koe::domain::due::{DueCall, shards_for};
use koe::domain::reservation::{Reservation, ReservationStatus, RunToken};
use koe::store::{ClaimAnswer, ClaimMark, Outcome};

use super::{DynStore, abandoned_before, finish_as, get_some, secs, seeded};

/// What the minute's index lists of `r`'s device, in every shard its count gives (a create whose
/// call id raised the count puts the next ones in shard 0 or 1 at random).
async fn listed(store: &DynStore, r: &Reservation) -> Vec<DueCall> {
    let minute = r.scheduled_at.due_minute();
    let count = store.due_count(&minute).await.expect("due_count");
    let mut listed = Vec::new();
    for shard in 0..shards_for(count) {
        let calls = store.due_calls(&minute, shard).await.expect("due_calls");
        listed.extend(calls.into_iter().filter(|c| c.device_id == r.device_id));
    }
    listed
}

async fn claim_notice(
    store: &DynStore,
    r: &Reservation,
    run: &RunToken,
    at: DateTime<Utc>,
) -> bool {
    store
        .claim_notice(&r.device_id, &r.call_id, run, at)
        .await
        .expect("claim_notice")
}

async fn release(
    store: &DynStore,
    r: &Reservation,
    run: &RunToken,
    now: DateTime<Utc>,
    retry_at: DateTime<Utc>,
) -> bool {
    store
        .release_notice(&r.device_id, &r.call_id, run, now, retry_at)
        .await
        .expect("release_notice")
}

async fn notice_sent(store: &DynStore, r: &Reservation, run: &RunToken, at: DateTime<Utc>) -> bool {
    store
        .notice_sent(&r.device_id, &r.call_id, run, at)
        .await
        .expect("notice_sent")
}

/// Released, the call is back in its minute's shard due at the retry time (its reserved second
/// and status unchanged, the notice unclaimed and marked for retry); a run's claim of it is
/// refused with that record; the next claim of its notice takes it off the index again; and of
/// the runs after, none claims or releases it once its notice left.
async fn a_released_notice_is_back_in_its_minutes_index_until_claimed(store: DynStore) {
    let (r, finished_at) = seeded(&store, ReservationStatus::Failed).await;
    let (a, b, c) = (
        RunToken::generate(),
        RunToken::generate(),
        RunToken::generate(),
    );
    let now = finished_at + secs(1);
    assert!(listed(&store, &r).await.is_empty(), "ended: off the index");
    assert!(
        !release(&store, &r, &a, now, now + secs(60)).await,
        "not claimed"
    );
    assert!(claim_notice(&store, &r, &a, now).await);
    let retry_at = now + secs(59);
    assert!(release(&store, &r, &a, now, retry_at).await);
    assert!(
        release(&store, &r, &a, now, retry_at).await,
        "made again after a lost reply"
    );
    let stored = get_some(&store, &r.device_id, now).await;
    assert!(stored.notice_retry, "{stored:?}");
    assert_eq!(stored.notice_claimed_by, None);
    assert_eq!(stored.status, ReservationStatus::Failed);
    assert_eq!(stored.scheduled_at, r.scheduled_at);
    assert_eq!(stored.due_at, retry_at);
    assert_eq!(
        listed(&store, &r).await,
        vec![DueCall::from(&stored)],
        "back in its minute's shard, due at the retry"
    );

    // A later run's claim is refused on the released notice.
    let later = retry_at;
    let answer = store
        .claim_due(
            &r.device_id,
            &r.call_id,
            &b,
            later,
            abandoned_before(later),
            ClaimMark::InBatch(later),
        )
        .await
        .unwrap();
    match answer {
        ClaimAnswer::Refused(Some(current)) => assert_eq!(*current, stored),
        other => panic!("refused with the record: {other:?}"),
    }
    // Its notice's claim takes it off the index.
    assert!(claim_notice(&store, &r, &b, later).await);
    assert!(
        !claim_notice(&store, &r, &c, later).await,
        "one run holds it"
    );
    assert!(
        listed(&store, &r).await.is_empty(),
        "claimed: off the index"
    );
    let claimed = get_some(&store, &r.device_id, later).await;
    assert!(!claimed.notice_retry);
    assert_eq!(claimed.notice_claimed_by, Some(b.clone()));
    assert!(
        !release(&store, &r, &a, later, retry_at).await,
        "no longer a's"
    );

    // Sent: never released nor claimed again.
    assert!(notice_sent(&store, &r, &b, later).await);
    assert!(!release(&store, &r, &b, later, later + secs(60)).await);
    assert!(!claim_notice(&store, &r, &c, later).await);
    assert!(listed(&store, &r).await.is_empty());
    let sent = get_some(&store, &r.device_id, later).await;
    assert_eq!(sent.notice_sent_at, Some(later));
}

/// Only the run that holds the notice releases it, only before it left, and only on a call
/// with a notice (a sent call has none); a missed call's notice is released as a failed one's;
/// an outcome written again after a lost reply keeps the call's shard for the release.
async fn a_notice_is_released_only_by_its_run_before_it_left(store: DynStore) {
    let (r, finished_at) = seeded(&store, ReservationStatus::Failed).await;
    let (a, b) = (RunToken::generate(), RunToken::generate());
    let now = finished_at + secs(1);
    assert!(claim_notice(&store, &r, &a, now).await);
    assert!(
        !release(&store, &r, &b, now, now + secs(60)).await,
        "another run's"
    );
    assert!(notice_sent(&store, &r, &a, now).await);
    assert!(
        !release(&store, &r, &a, now, now + secs(60)).await,
        "it left"
    );
    let stored = get_some(&store, &r.device_id, now).await;
    assert!(!stored.notice_retry);
    assert_eq!(stored.notice_claimed_by, Some(a.clone()));
    assert!(listed(&store, &r).await.is_empty());

    let (sent, finished_at) = seeded(&store, ReservationStatus::Sent).await;
    let now = finished_at + secs(1);
    assert!(!claim_notice(&store, &sent, &a, now).await);
    assert!(!release(&store, &sent, &a, now, now + secs(60)).await);
    assert!(listed(&store, &sent).await.is_empty());

    let (missed, finished_at) = seeded(&store, ReservationStatus::Missed).await;
    let now = finished_at + secs(1);
    assert!(claim_notice(&store, &missed, &a, now).await);
    assert!(release(&store, &missed, &a, now, now + secs(30)).await);
    assert_eq!(
        listed(&store, &missed).await.len(),
        1,
        "a missed call's too"
    );

    // Failed, written again by its run (its first reply lost): the shard is still kept.
    let (claimed, claimed_at) = seeded(&store, ReservationStatus::Claimed).await;
    let now = claimed_at + secs(1);
    assert!(finish_as(&store, &claimed, Outcome::Failed, &a, now).await);
    assert!(finish_as(&store, &claimed, Outcome::Failed, &a, now).await);
    assert!(claim_notice(&store, &claimed, &a, now).await);
    assert!(release(&store, &claimed, &a, now, now + secs(30)).await);
    assert_eq!(listed(&store, &claimed).await.len(), 1);
}

contract_suite!(
    a_released_notice_is_back_in_its_minutes_index_until_claimed,
    a_notice_is_released_only_by_its_run_before_it_left,
);
