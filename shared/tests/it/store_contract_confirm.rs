//! The `Store` contract for calls to a device that confirms its pushes (held against both
//! adapters, with `store_contract`'s fixtures): a push counts and makes the call due again, a
//! confirmation ends it `rang` (never while a push again is leaving), the last wait ends it
//! `unconfirmed`, and a push whose run stopped after its mark counts and goes again.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use koe::domain::reservation::{Reservation, ReservationStatus, RunToken};
use koe::store::memory::MemoryStore;
use koe::store::{CancelError, ClaimAnswer, ClaimMark, ConfirmAnswer, Outcome};
use koe_testkit::dynamodb::reply_drop::ReplyDropper;
use koe_testkit::on_call::OnCall;

use super::store_contract::{
    CLAIM_TIMEOUT, DynStore, LEAD, abandoned_before, create, finish_as, get_some, missed_before,
    new_device_id, reservation, secs, t0,
};

const WAIT: Duration = Duration::seconds(5);

/// A new call to a device that confirms, created at `t0()`; the call and its second.
async fn new_call(store: &DynStore) -> (Reservation, DateTime<Utc>) {
    let r = reservation(&new_device_id(), t0(), LEAD);
    create(store, &r, t0()).await;
    let due = r.scheduled_at.utc();
    (r, due)
}

/// `run` claims the call's first push at `due` and marks it started (no outcome yet).
async fn first_push_marked(store: &DynStore, r: &Reservation, run: &RunToken, due: DateTime<Utc>) {
    assert_eq!(claim_pushes(store, r, run, due).await, Some(0));
    assert!(mark(store, r, run, due).await);
}

async fn claim_pushes(
    store: &DynStore,
    r: &Reservation,
    run: &RunToken,
    now: DateTime<Utc>,
) -> Option<u32> {
    match store
        .claim_due_for(r, run, now, abandoned_before(now), ClaimMark::Apart)
        .await
        .expect("claim_due")
    {
        ClaimAnswer::Won { pushes } => Some(pushes),
        ClaimAnswer::Refused(_) => None,
    }
}

async fn mark(store: &DynStore, r: &Reservation, run: &RunToken, now: DateTime<Utc>) -> bool {
    store
        .mark_push_started(&r.device_id, &r.call_id, run, now, true)
        .await
        .expect("mark_push_started")
}

async fn confirm(store: &DynStore, r: &Reservation, now: DateTime<Utc>) -> ConfirmAnswer {
    store
        .confirm_call(&r.device_id, &r.call_id, now)
        .await
        .expect("confirm_call")
}

/// One push of attempt `pushes + 1` by a run of its own, at `at`, recorded as left: due again
/// at `at + WAIT`.
async fn push_once(store: &DynStore, r: &Reservation, pushes: u32, at: DateTime<Utc>) {
    let run = RunToken::generate();
    assert_eq!(
        claim_pushes(store, r, &run, at).await,
        Some(pushes),
        "claim"
    );
    assert!(mark(store, r, &run, at).await, "mark");
    let pushed = Outcome::Pushed {
        next_at: at + WAIT,
        pushes: pushes + 1,
    };
    assert!(finish_as(store, r, pushed, &run, at).await, "finish pushed");
}

fn rang(answer: ConfirmAnswer) -> Reservation {
    match answer {
        ConfirmAnswer::Rang(r) => *r,
        other => panic!("not rang: {other:?}"),
    }
}

/// Three pushes at least the wait apart, none confirmed: `sent` between them (the API's view),
/// never claimed before it is due again, then `unconfirmed` at the last wait's end.
async fn an_unconfirmed_call_is_pushed_three_times_then_ends_unconfirmed(store: DynStore) {
    let (r, due) = new_call(&store).await;
    for pushes in 0..3 {
        let at = due + WAIT * pushes as i32;
        if pushes > 0 {
            let early = RunToken::generate();
            assert_eq!(
                claim_pushes(&store, &r, &early, at - secs(2)).await,
                None,
                "claimed before the wait ended"
            );
        }
        push_once(&store, &r, pushes, at).await;
        let stored = get_some(&store, &r.device_id, at).await;
        assert_eq!(stored.pushes, pushes + 1);
        assert_eq!(stored.due_at, at + WAIT);
        assert_eq!(stored.status_seen(at - secs(600)), ReservationStatus::Sent);
        let listed = store
            .due_calls(&r.scheduled_at.due_minute(), 0)
            .await
            .unwrap();
        assert!(
            listed
                .iter()
                .any(|c| c.call_id == r.call_id && c.due_at == at + WAIT),
            "still in the bucket index, due again"
        );
    }
    let end = due + WAIT * 3;
    let run = RunToken::generate();
    assert_eq!(claim_pushes(&store, &r, &run, end).await, Some(3));
    assert!(finish_as(&store, &r, Outcome::Unconfirmed, &run, end).await);
    let stored = get_some(&store, &r.device_id, end).await;
    assert_eq!(
        (stored.status, stored.pushes),
        (ReservationStatus::Unconfirmed, 3)
    );
    assert!(
        store
            .due_calls(&r.scheduled_at.due_minute(), 0)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A confirmation of the first push (before or after its run recorded it), or of the second:
/// `rang` with its time and the pushes that left; repeated, the same record; no claim after.
async fn a_confirmed_call_is_rang_and_never_claimed_again(store: DynStore) {
    // Confirmed while its first push's outcome is not recorded yet (mark written).
    let (r, due) = new_call(&store).await;
    let run = RunToken::generate();
    first_push_marked(&store, &r, &run, due).await;
    let at = due + Duration::milliseconds(300);
    let first = rang(confirm(&store, &r, at).await);
    assert_eq!((first.rang_at, first.pushes), (Some(at), 1));
    let pushed = Outcome::Pushed {
        next_at: due + WAIT,
        pushes: 1,
    };
    assert!(
        !finish_as(&store, &r, pushed, &run, due).await,
        "confirmed first"
    );
    let again = rang(confirm(&store, &r, at + secs(1)).await);
    assert_eq!(
        again.rang_at,
        Some(at),
        "the first confirmation's time kept"
    );
    assert_eq!(
        claim_pushes(&store, &r, &RunToken::generate(), due + WAIT).await,
        None
    );

    // Confirmed after its second push was recorded.
    let r = reservation(&new_device_id(), t0(), LEAD);
    create(&store, &r, t0()).await;
    push_once(&store, &r, 0, due).await;
    push_once(&store, &r, 1, due + WAIT).await;
    let at = due + WAIT + secs(1);
    let stored = rang(confirm(&store, &r, at).await);
    assert_eq!(
        (stored.status, stored.pushes, stored.rang_at),
        (ReservationStatus::Rang, 2, Some(at))
    );
    assert_eq!(
        claim_pushes(&store, &r, &RunToken::generate(), due + WAIT * 2).await,
        None
    );
}

/// A push again that is leaving (claimed, marked) holds a confirmation back until its outcome
/// is written; one claimed but not marked yet is stopped by the confirmation (its mark is
/// refused): no push follows a stored confirmation.
async fn a_confirmation_never_precedes_a_push_again(store: DynStore) {
    let (r, due) = new_call(&store).await;
    push_once(&store, &r, 0, due).await;
    let again = due + WAIT;
    let run = RunToken::generate();
    assert_eq!(claim_pushes(&store, &r, &run, again).await, Some(1));
    assert!(mark(&store, &r, &run, again).await);
    assert_eq!(
        confirm(&store, &r, again).await,
        ConfirmAnswer::PushInFlight
    );
    let pushed = Outcome::Pushed {
        next_at: again + WAIT,
        pushes: 2,
    };
    assert!(finish_as(&store, &r, pushed, &run, again).await);
    let stored = rang(confirm(&store, &r, again + secs(1)).await);
    assert_eq!(stored.pushes, 2);

    // Claimed for its third push, not marked: the confirmation wins, the mark is refused.
    let r = reservation(&new_device_id(), t0(), LEAD);
    create(&store, &r, t0()).await;
    push_once(&store, &r, 0, due).await;
    let run = RunToken::generate();
    assert_eq!(claim_pushes(&store, &r, &run, due + WAIT).await, Some(1));
    rang(confirm(&store, &r, due + WAIT).await);
    assert!(
        !mark(&store, &r, &run, due + WAIT).await,
        "no push after it"
    );
}

/// A confirmation of no push that left: none, another call, not pushed yet, cancelled.
async fn a_confirmation_of_no_push_is_not_found(store: DynStore) {
    let r = reservation(&new_device_id(), t0(), LEAD);
    assert_eq!(confirm(&store, &r, t0()).await, ConfirmAnswer::NotFound);
    create(&store, &r, t0()).await;
    assert_eq!(
        confirm(&store, &r, t0()).await,
        ConfirmAnswer::NotFound,
        "not pushed yet"
    );
    let other = reservation(&r.device_id, t0(), LEAD);
    assert_eq!(confirm(&store, &other, t0()).await, ConfirmAnswer::NotFound);
    let run = RunToken::generate();
    let due = r.scheduled_at.utc();
    assert_eq!(claim_pushes(&store, &r, &run, due).await, Some(0));
    assert_eq!(
        confirm(&store, &r, due).await,
        ConfirmAnswer::NotFound,
        "claimed, its push not started"
    );
    let cancelled = reservation(&new_device_id(), t0(), LEAD);
    create(&store, &cancelled, t0()).await;
    store
        .cancel_reservation(&cancelled.device_id, None, t0(), missed_before(t0()))
        .await
        .unwrap();
    assert_eq!(
        confirm(&store, &cancelled, t0()).await,
        ConfirmAnswer::NotFound
    );
}

/// A run that stopped after marking a push to a device that confirms its calls: once its claim
/// is abandoned, another run counts that push and pushes again; a call waiting for its push
/// again can no longer be cancelled, nor missed (it ends unconfirmed).
async fn a_push_whose_run_stopped_counts_and_goes_again(store: DynStore) {
    let (r, due) = new_call(&store).await;
    let gone = RunToken::generate();
    first_push_marked(&store, &r, &gone, due).await;
    let later = due + CLAIM_TIMEOUT + secs(1);
    let run = RunToken::generate();
    let refused = store
        .claim_due_for(&r, &run, later, abandoned_before(later), ClaimMark::Apart)
        .await
        .unwrap();
    let ClaimAnswer::Refused(Some(current)) = refused else {
        panic!("a started push is never claimed over: {refused:?}");
    };
    assert!(current.confirms && current.push_started_at.is_some());
    let counted = Outcome::Pushed {
        next_at: later,
        pushes: 1,
    };
    assert!(finish_as(&store, &r, counted, &run, later).await);
    assert_eq!(claim_pushes(&store, &r, &run, later).await, Some(1));
    assert!(mark(&store, &r, &run, later).await);
    let pushed = Outcome::Pushed {
        next_at: later + WAIT,
        pushes: 2,
    };
    assert!(finish_as(&store, &r, pushed, &run, later).await);
    assert_eq!(
        store
            .cancel_reservation(
                &r.device_id,
                None,
                later + secs(1),
                missed_before(later + secs(1))
            )
            .await,
        Err(CancelError::TooLate(ReservationStatus::Sent))
    );
    let past = due + Duration::minutes(10);
    assert!(!finish_as(&store, &r, Outcome::Missed, &run, past).await);
    assert!(finish_as(&store, &r, Outcome::Unconfirmed, &run, past).await);
    assert_eq!(
        get_some(&store, &r.device_id, past).await.status,
        ReservationStatus::Unconfirmed
    );
}

/// A confirmation of a first push whose outcome (counted, due again) the run writes while the
/// confirmation is being stored: on DynamoDB Local the confirmation's write is answered late
/// (`hold`) and the outcome lands before its answer. It is `rang` (the push rang), never 404.
async fn a_confirmation_meeting_its_push_outcome_is_rang(
    store: DynStore,
    hold: Option<&ReplyDropper>,
) {
    let (r, due) = new_call(&store).await;
    let run = RunToken::generate();
    first_push_marked(&store, &r, &run, due).await;
    let at = due + Duration::milliseconds(300);
    if let Some(proxy) = hold {
        proxy.hold_replies(
            "UpdateItem",
            "rangAtMs",
            1,
            std::time::Duration::from_millis(500),
        );
    }
    let confirming = tokio::spawn({
        let (store, r) = (store.clone(), r.clone());
        async move { confirm(&store, &r, at).await }
    });
    if let Some(proxy) = hold {
        // The confirmation's write was carried out; its answer is held.
        while proxy.dropped() == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
    let pushed = Outcome::Pushed {
        next_at: at + WAIT,
        pushes: 1,
    };
    finish_as(&store, &r, pushed, &run, at).await;
    let answer = confirming.await.unwrap();
    let confirmed = rang(answer);
    assert_eq!(
        (confirmed.status, confirmed.pushes),
        (ReservationStatus::Rang, 1)
    );
    let stored = get_some(&store, &r.device_id, at).await;
    assert_eq!((stored.status, stored.pushes), (ReservationStatus::Rang, 1));
}

#[tokio::test]
async fn a_confirmation_meeting_its_push_outcome_is_rang_on_the_memory_store() {
    let store: DynStore = Arc::new(MemoryStore::new());
    a_confirmation_meeting_its_push_outcome_is_rang(store, None).await;
}

#[tokio::test]
async fn a_confirmation_meeting_its_push_outcome_is_rang_on_dynamodb_local() {
    let (store, proxy) = super::faults_lost_replies::store_behind_a_dropper().await;
    let store: DynStore = Arc::new(store);
    a_confirmation_meeting_its_push_outcome_is_rang(store, Some(&proxy)).await;
}

on_each_store!(
    an_unconfirmed_call_is_pushed_three_times_then_ends_unconfirmed,
    a_confirmed_call_is_rang_and_never_claimed_again,
    a_confirmation_never_precedes_a_push_again,
    a_confirmation_of_no_push_is_not_found,
    a_push_whose_run_stopped_counts_and_goes_again,
);
