//! A run's claim of a due call: won once, made again, abandoned, marked (on its own or by its
//! batch), given back.

use chrono::{DateTime, Duration, Utc};
use koe::domain::reservation::{CallId, Reservation, ReservationStatus, RunToken};
use koe::store::{BatchFence, ClaimAnswer, ClaimMark, Outcome};
use koe_testkit::on_call::OnCall;

use super::{
    CLAIM_TIMEOUT, DynStore, GRACE, abandoned_before, claim, claim_as, finish, get, get_some,
    mark_as, new_device_id, new_runs_claim, release_as, secs, seeded,
};

async fn claim_with_a_wrong_call_id_or_device_is_refused(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let now = r.scheduled_at.utc();
    let wrong = CallId::generate();
    assert_ne!(wrong, r.call_id);
    assert!(
        !new_runs_claim(&store, (&r.device_id, &wrong), now, abandoned_before(now)).await,
        "wrong callId"
    );
    assert_eq!(get(&store, &r.device_id, now).await, Some(r.clone()));
    assert!(
        !new_runs_claim(
            &store,
            (&new_device_id(), &r.call_id),
            now,
            abandoned_before(now)
        )
        .await,
        "unknown device"
    );
}

async fn claim_scheduled_wins_and_records_claimed_at(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let now = r.scheduled_at.utc() - Duration::milliseconds(1500);
    let run = RunToken::generate();
    assert!(claim_as(&store, &r, &run, now).await);
    let stored = get_some(&store, &r.device_id, now).await;
    let expected = Reservation {
        status: ReservationStatus::Claimed,
        claimed_at: Some(now),
        claimed_by: Some(run),
        updated_at: now,
        ..r
    };
    assert_eq!(stored, expected);
}

/// A claim whose reply was lost, made again by its run: won again (the run's own), its time the
/// new attempt's; another run's claim of it is still refused.
async fn a_claim_made_again_by_its_own_run_is_won_again(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let first = r.scheduled_at.utc() - Duration::milliseconds(500);
    let run = RunToken::generate();
    assert!(claim_as(&store, &r, &run, first).await, "first attempt");
    let again = first + Duration::milliseconds(700);
    assert!(claim_as(&store, &r, &run, again).await, "made again: own");
    let stored = get_some(&store, &r.device_id, again).await;
    assert_eq!(
        (stored.status, stored.claimed_at, stored.claimed_by.as_ref()),
        (ReservationStatus::Claimed, Some(again), Some(&run))
    );
    assert!(!claim(&store, &r, again).await, "another run's claim");
    // Once marked, the run's own claim answers the same (its push has not left).
    assert!(mark_as(&store, &r, &run, again).await);
    assert!(claim_as(&store, &r, &run, again).await);
}

async fn a_second_claim_of_a_fresh_claim_is_refused(store: DynStore) {
    let (r, claimed_at) = seeded(&store, ReservationStatus::Claimed).await;
    let now = claimed_at + secs(5);
    assert!(!claim(&store, &r, now).await, "fresh claim held");
    // Boundary: a claim made exactly at `abandoned_before` is not abandoned.
    assert!(
        !new_runs_claim(&store, (&r.device_id, &r.call_id), now, claimed_at).await,
        "claimed_at == abandoned_before is not abandoned"
    );
    assert_eq!(get(&store, &r.device_id, now).await, Some(r));
}

async fn a_claim_made_before_abandoned_before_can_be_reclaimed(store: DynStore) {
    let (r, claimed_at) = seeded(&store, ReservationStatus::Claimed).await;
    let now = claimed_at + CLAIM_TIMEOUT + Duration::milliseconds(1);
    assert!(abandoned_before(now) > claimed_at);
    assert!(claim(&store, &r, now).await, "abandoned claim re-claimed");
    let stored = get_some(&store, &r.device_id, now).await;
    assert_eq!(stored.status, ReservationStatus::Claimed);
    assert_eq!(stored.claimed_at, Some(now), "the new claim's time");
    assert_eq!(stored.call_id, r.call_id);
    // The new claim is fresh again.
    let soon = now + secs(1);
    assert!(!claim(&store, &r, soon).await, "the re-claim is fresh");
}

async fn the_push_mark_is_the_claims_own_and_a_marked_claim_is_never_taken_over(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let run = RunToken::generate();
    let claimed_at = r.scheduled_at.utc() - Duration::milliseconds(500);
    assert!(claim_as(&store, &r, &run, claimed_at).await);
    let claimed = get_some(&store, &r.device_id, claimed_at).await;
    let now = claimed_at + Duration::milliseconds(300);
    assert!(
        !mark_as(&store, &r, &RunToken::generate(), now).await,
        "another run's mark"
    );
    assert!(
        !store
            .mark_push_started(&r.device_id, &CallId::generate(), &run, now, false)
            .await
            .expect("mark_push_started"),
        "another call's mark"
    );
    assert_eq!(get(&store, &r.device_id, now).await, Some(claimed.clone()));
    assert!(mark_as(&store, &r, &run, now).await, "the claim's own mark");
    let again = now + Duration::milliseconds(600);
    assert!(
        mark_as(&store, &r, &run, again).await,
        "marking again (its reply was lost) is the same mark"
    );
    let stored = get_some(&store, &r.device_id, again).await;
    assert_eq!(
        stored,
        Reservation {
            push_started_at: Some(now),
            ..claimed.clone()
        },
        "the first mark's time is kept"
    );

    // Abandoned after the mark: never re-claimed, never missed; a run records it failed.
    let later = claimed_at + GRACE + secs(1);
    assert!(abandoned_before(later) > claimed_at);
    a_marked_claim_only_fails(&store, &r, later).await;
    assert_eq!(
        get_some(&store, &r.device_id, later).await.status,
        ReservationStatus::Failed
    );
    assert!(
        !mark_as(&store, &r, &run, later).await,
        "a finished call has no claim to mark"
    );

    // A scheduled reservation has no claim to mark.
    let (scheduled, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let at = scheduled.scheduled_at.utc();
    assert!(!mark_as(&store, &scheduled, &run, at).await, "scheduled");
}

/// A run that could not resolve its push mark in time gives its claim back: `scheduled` again,
/// mark and claim gone, claimable at once by any run; made again (its reply lost) it answers
/// the same; a claim of another run, or a finished call, is not given back.
async fn a_claim_given_back_by_its_run_is_scheduled_again(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let run = RunToken::generate();
    let claimed_at = r.scheduled_at.utc() - Duration::milliseconds(500);
    assert!(claim_as(&store, &r, &run, claimed_at).await);
    let now = claimed_at + secs(2);
    assert!(mark_as(&store, &r, &run, now).await);
    assert!(
        !release_as(&store, &r, &RunToken::generate(), now).await,
        "another run's release"
    );
    assert_eq!(
        get_some(&store, &r.device_id, now).await.status,
        ReservationStatus::Claimed
    );
    let later = now + secs(10);
    assert!(release_as(&store, &r, &run, later).await, "its own");
    let stored = get_some(&store, &r.device_id, later).await;
    assert_eq!(
        stored,
        Reservation {
            updated_at: later,
            ..r.clone()
        },
        "as it was before the claim"
    );
    assert!(
        release_as(&store, &r, &run, later).await,
        "made again: already released"
    );
    assert!(
        !mark_as(&store, &r, &run, later).await,
        "no claim to mark any more"
    );
    assert!(
        claim(&store, &r, later).await,
        "claimable by any run at once"
    );
    let sent = later + secs(1);
    assert!(finish(&store, &r, Outcome::Sent, sent).await);
    assert!(
        !release_as(&store, &r, &run, sent).await,
        "a finished call is not released"
    );
    assert_eq!(
        get_some(&store, &r.device_id, sent).await.status,
        ReservationStatus::Sent
    );
}

/// `run`'s claim of `r` at `now` in its batch of `r`'s second (`ClaimMark::InBatch`).
async fn claim_in_batch(
    store: &DynStore,
    r: &Reservation,
    run: &RunToken,
    now: DateTime<Utc>,
) -> ClaimAnswer {
    let batch = ClaimMark::InBatch(r.scheduled_at.utc());
    store
        .claim_due_for(r, run, now, abandoned_before(now), batch)
        .await
        .expect("claim_due")
}

/// A claim in a batch names it and is not marked: made again by its run it is won again; its
/// run's give-back removes it with the claim. Abandoned, it is not claimable (nor missed) until
/// settled: another run fences the batch (from then on its run's mark is refused, so none of
/// its pushes leaves) and settles the claim, which is then claimable like any unmarked one.
async fn a_claim_in_a_batch_is_taken_over_only_once_its_batch_is_fenced(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let batch = r.scheduled_at.utc();
    let (a, b) = (RunToken::generate(), RunToken::generate());
    let claimed_at = batch - secs(5);
    let won = claim_in_batch(&store, &r, &a, claimed_at).await;
    assert!(matches!(won, ClaimAnswer::Won { pushes: 0 }), "{won:?}");
    let claimed = Reservation {
        status: ReservationStatus::Claimed,
        claimed_at: Some(claimed_at),
        claimed_by: Some(a.clone()),
        mark_batch: Some(batch),
        updated_at: claimed_at,
        ..r.clone()
    };
    assert_eq!(get_some(&store, &r.device_id, claimed_at).await, claimed);
    let won = claim_in_batch(&store, &r, &a, claimed_at).await;
    assert!(
        matches!(won, ClaimAnswer::Won { .. }),
        "made again: {won:?}"
    );
    assert!(
        release_as(&store, &r, &a, claimed_at).await,
        "its give-back"
    );
    let released = get_some(&store, &r.device_id, claimed_at).await;
    assert_eq!(
        (released.status, released.mark_batch, released.claimed_by),
        (ReservationStatus::Scheduled, None, None)
    );
    let won = claim_in_batch(&store, &r, &a, claimed_at).await;
    assert!(matches!(won, ClaimAnswer::Won { .. }), "{won:?}");

    // Abandoned (its run stopped before its batch's mark): refused to a plain claim and to a
    // miss, with the record that names the batch.
    let later = claimed_at + CLAIM_TIMEOUT + secs(1);
    assert!(!claim(&store, &r, later).await, "not claimable unsettled");
    let other = claim_in_batch(&store, &r, &b, later).await;
    let ClaimAnswer::Refused(Some(current)) = other else {
        panic!("refused with the record: {other:?}");
    };
    assert_eq!(
        (
            current.mark_batch,
            current.claimed_by.as_ref(),
            current.push_started_at
        ),
        (Some(batch), Some(&a), None)
    );
    assert!(
        !finish(&store, &r, Outcome::Missed, later).await,
        "not missed"
    );

    // Fenced: the stopped run's mark is refused from then on; a fence made again finds it so.
    let fenced = store.fence_batch(&a, batch, later).await.unwrap();
    assert_eq!(fenced, BatchFence::Fenced);
    assert!(
        !store.mark_batch(&a, batch, later).await.unwrap(),
        "fenced first"
    );
    let again = store.fence_batch(&a, batch, later).await.unwrap();
    assert_eq!(again, BatchFence::Fenced);
    // Settled (once; a settle of another batch, or made again, changes nothing), then claimed.
    let settle = |claimant: &RunToken, batch, marked| {
        let (store, r, claimant) = (store.clone(), r.clone(), claimant.clone());
        async move {
            store
                .settle_batch(&r.device_id, &r.call_id, &claimant, later, (batch, marked))
                .await
                .unwrap()
        }
    };
    assert!(!settle(&a, batch - secs(1), None).await, "another batch");
    assert!(!settle(&b, batch, None).await, "another run's claim");
    assert!(settle(&a, batch, None).await);
    assert!(!settle(&a, batch, None).await, "settled before");
    let settled = get_some(&store, &r.device_id, later).await;
    assert_eq!((settled.mark_batch, settled.push_started_at), (None, None));
    let won = claim_in_batch(&store, &r, &b, later).await;
    assert!(
        matches!(won, ClaimAnswer::Won { .. }),
        "taken over: {won:?}"
    );
}

/// A run's batch mark stands once written (made again, the first time kept), and a fence
/// after it finds it marked: the claim it stands for, abandoned and settled, carries the push
/// mark from the batch's time, is never re-claimed nor missed, and ends `failed`.
async fn a_marked_batch_leaves_its_abandoned_claims_marked(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let batch = r.scheduled_at.utc();
    let a = RunToken::generate();
    let claimed_at = batch - secs(1);
    let won = claim_in_batch(&store, &r, &a, claimed_at).await;
    assert!(matches!(won, ClaimAnswer::Won { .. }), "{won:?}");
    assert!(store.mark_batch(&a, batch, batch).await.unwrap());
    let again = batch + Duration::milliseconds(300);
    assert!(
        store.mark_batch(&a, batch, again).await.unwrap(),
        "made again"
    );

    let later = claimed_at + CLAIM_TIMEOUT + secs(1);
    let fence = store.fence_batch(&a, batch, later).await.unwrap();
    assert_eq!(fence, BatchFence::Marked(batch), "the first mark's time");
    let settled = store
        .settle_batch(&r.device_id, &r.call_id, &a, later, (batch, Some(batch)))
        .await
        .unwrap();
    assert!(settled);
    let current = get_some(&store, &r.device_id, later).await;
    assert_eq!(
        (current.status, current.mark_batch, current.push_started_at),
        (ReservationStatus::Claimed, None, Some(batch))
    );
    a_marked_claim_only_fails(&store, &r, later).await;
}

/// A claim whose push was marked started, past its claim's timeout at `later`: never
/// re-claimed, never missed (its push may have left); a run records it failed.
async fn a_marked_claim_only_fails(store: &DynStore, r: &Reservation, later: DateTime<Utc>) {
    assert!(
        !claim(store, r, later).await,
        "a marked claim is not re-claimed"
    );
    assert!(
        !finish(store, r, Outcome::Missed, later).await,
        "a marked claim is not missed"
    );
    assert!(
        finish(store, r, Outcome::Failed, later).await,
        "a marked claim fails (push state unknown)"
    );
}

contract_suite!(
    claim_with_a_wrong_call_id_or_device_is_refused,
    claim_scheduled_wins_and_records_claimed_at,
    a_claim_made_again_by_its_own_run_is_won_again,
    a_second_claim_of_a_fresh_claim_is_refused,
    a_claim_made_before_abandoned_before_can_be_reclaimed,
    the_push_mark_is_the_claims_own_and_a_marked_claim_is_never_taken_over,
    a_claim_given_back_by_its_run_is_scheduled_again,
    a_claim_in_a_batch_is_taken_over_only_once_its_batch_is_fenced,
    a_marked_batch_leaves_its_abandoned_claims_marked,
);
