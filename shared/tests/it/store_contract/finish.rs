//! A call's outcome recorded by its run: sent, failed or missed, and only once.

use chrono::{DateTime, Duration, Utc};
use koe::domain::device::DeviceId;
use koe::domain::reservation::{CallId, Reservation, ReservationStatus, RunToken, terminal_expiry};
use koe::store::Outcome;

use super::{
    DynStore, GRACE, abandoned_before, claim, finish, finish_as, get, get_some, secs, seeded,
};

/// A new run's `outcome` for `call` on `device` at `now`.
async fn new_runs_finish(
    store: &DynStore,
    (device, call): (&DeviceId, &CallId),
    outcome: Outcome,
    now: DateTime<Utc>,
    abandoned_before: DateTime<Utc>,
) -> bool {
    let run = RunToken::generate();
    let finish = store.finish_reservation(device, call, outcome, &run, now, abandoned_before);
    finish.await.expect("finish_reservation")
}

async fn finish_sent_or_failed_from_claimed_sets_status_and_expiry(store: DynStore) {
    for outcome in [Outcome::Sent, Outcome::Failed] {
        let (r, claimed_at) = seeded(&store, ReservationStatus::Claimed).await;
        let now = claimed_at + Duration::milliseconds(700);
        let run = RunToken::generate();
        assert!(
            finish_as(&store, &r, outcome, &run, now).await,
            "{outcome:?}"
        );
        let stored = get_some(&store, &r.device_id, now).await;
        let expected = Reservation {
            status: outcome.status(),
            updated_at: now,
            expire_at: Some(terminal_expiry(now)),
            finished_by: Some(run),
            // A push that left counts.
            pushes: u32::from(outcome == Outcome::Sent),
            ..r
        };
        assert_eq!(stored, expected, "{outcome:?} keeps claimed_at");
    }
}

async fn finish_sent_or_failed_from_scheduled_is_refused(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let now = r.scheduled_at.utc();
    assert!(!finish(&store, &r, Outcome::Sent, now).await, "sent");
    assert!(!finish(&store, &r, Outcome::Failed, now).await, "failed");
    assert_eq!(get(&store, &r.device_id, now).await, Some(r));
}

async fn finish_with_a_wrong_call_id_is_refused(store: DynStore) {
    let (r, claimed_at) = seeded(&store, ReservationStatus::Claimed).await;
    let now = claimed_at + secs(1);
    let wrong = CallId::generate();
    for outcome in [Outcome::Sent, Outcome::Failed, Outcome::Missed] {
        assert!(
            !new_runs_finish(&store, (&r.device_id, &wrong), outcome, now, now).await,
            "{outcome:?} with a wrong callId"
        );
    }
    assert_eq!(get(&store, &r.device_id, now).await, Some(r));
}

async fn finish_missed_from_scheduled_sets_status_and_expiry(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let now = r.scheduled_at.utc() + GRACE + Duration::milliseconds(250);
    let run = RunToken::generate();
    assert!(finish_as(&store, &r, Outcome::Missed, &run, now).await);
    let stored = get_some(&store, &r.device_id, now).await;
    let expected = Reservation {
        status: ReservationStatus::Missed,
        updated_at: now,
        expire_at: Some(terminal_expiry(now)),
        finished_by: Some(run),
        ..r
    };
    assert_eq!(stored, expected);
}

async fn finish_missed_from_a_fresh_claim_is_refused_but_not_from_an_abandoned_one(
    store: DynStore,
) {
    let (r, claimed_at) = seeded(&store, ReservationStatus::Claimed).await;
    let now = claimed_at + secs(5);
    assert!(
        !finish(&store, &r, Outcome::Missed, now).await,
        "fresh claim"
    );
    assert_eq!(get(&store, &r.device_id, now).await, Some(r.clone()));

    let later = claimed_at + GRACE + secs(1);
    assert!(abandoned_before(later) > claimed_at);
    assert!(
        finish(&store, &r, Outcome::Missed, later).await,
        "abandoned claim"
    );
    let stored = get_some(&store, &r.device_id, later).await;
    assert_eq!(stored.status, ReservationStatus::Missed);
    assert_eq!(stored.expire_at, Some(terminal_expiry(later)));
}

async fn finishing_twice_is_refused_the_second_time(store: DynStore) {
    let (r, claimed_at) = seeded(&store, ReservationStatus::Claimed).await;
    let now = claimed_at + secs(1);
    let run = RunToken::generate();
    assert!(
        finish_as(&store, &r, Outcome::Sent, &run, now).await,
        "first finish"
    );
    assert!(
        finish_as(&store, &r, Outcome::Sent, &run, now + secs(2)).await,
        "made again by its run (the first reply lost): answered as written"
    );
    let sent = get_some(&store, &r.device_id, now).await;
    assert_eq!(
        (sent.status, sent.updated_at),
        (ReservationStatus::Sent, now + secs(2)),
        "the outcome's time is the last attempt's"
    );
    for other in [Outcome::Failed, Outcome::Missed] {
        assert!(
            !finish_as(&store, &r, other, &run, now + secs(2)).await,
            "{other:?} by the same run after sent"
        );
    }
    let later = now + secs(10);
    for outcome in [Outcome::Sent, Outcome::Failed, Outcome::Missed] {
        assert!(
            !finish(&store, &r, outcome, later).await,
            "{outcome:?} after sent"
        );
    }
    // Also far later, when every claim would count as abandoned.
    assert!(
        !finish(&store, &r, Outcome::Missed, now + secs(3600)).await,
        "missed after sent, much later"
    );
    assert!(
        !claim(&store, &r, now + secs(3600)).await,
        "a finished record is never claimed again"
    );
    assert_eq!(
        get(&store, &r.device_id, later).await,
        Some(sent),
        "unchanged"
    );
}

/// The missed-call notice's claim: only on a call ended failed, missed or unconfirmed; one run
/// holds it (the same run asking again, after a lost reply, holds it still), and only that run
/// records `notice_sent_at` (the first time kept).
async fn one_run_claims_a_calls_notice(store: DynStore) {
    let (r, claimed_at) = seeded(&store, ReservationStatus::Claimed).await;
    let now = claimed_at + secs(1);
    let (a, b) = (RunToken::generate(), RunToken::generate());
    // The notice's claim (`sent` false) or the record that it left (`sent` true).
    let notice = |sent: bool, run: &RunToken, call: &CallId, at| {
        let (store, run, call, device) = (
            store.clone(),
            run.clone(),
            call.clone(),
            r.device_id.clone(),
        );
        async move {
            let answer = match sent {
                false => store.claim_notice(&device, &call, &run, at).await,
                true => store.notice_sent(&device, &call, &run, at).await,
            };
            answer.expect("notice write")
        }
    };
    let claim_notice = |run: &RunToken, call: &CallId| notice(false, run, call, now);
    assert!(
        !claim_notice(&a, &r.call_id).await,
        "not before the outcome"
    );
    assert!(finish_as(&store, &r, Outcome::Failed, &a, now).await);
    assert!(!claim_notice(&a, &CallId::generate()).await, "another call");
    assert!(claim_notice(&a, &r.call_id).await);
    assert!(claim_notice(&a, &r.call_id).await, "made again by its run");
    assert!(!claim_notice(&b, &r.call_id).await, "another run's");
    let sent = |run: &RunToken, at| notice(true, run, &r.call_id, at);
    assert!(!sent(&b, now).await, "not by another run");
    assert!(sent(&a, now).await);
    assert!(sent(&a, now + secs(1)).await, "made again");
    let stored = get_some(&store, &r.device_id, now).await;
    assert_eq!(stored.notice_sent_at, Some(now), "the first time kept");
    assert_eq!(stored.status, ReservationStatus::Failed);

    let (sent_call, claimed_at) = seeded(&store, ReservationStatus::Claimed).await;
    let now = claimed_at + secs(1);
    assert!(finish_as(&store, &sent_call, Outcome::Sent, &a, now).await);
    let refused = store
        .claim_notice(&sent_call.device_id, &sent_call.call_id, &a, now)
        .await
        .unwrap();
    assert!(!refused, "a sent call has no notice");
}

contract_suite!(
    one_run_claims_a_calls_notice,
    finish_sent_or_failed_from_claimed_sets_status_and_expiry,
    finish_sent_or_failed_from_scheduled_is_refused,
    finish_with_a_wrong_call_id_is_refused,
    finish_missed_from_scheduled_sets_status_and_expiry,
    finish_missed_from_a_fresh_claim_is_refused_but_not_from_an_abandoned_one,
    finishing_twice_is_refused_the_second_time,
);
