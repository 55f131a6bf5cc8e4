//! Reservations made, read and cancelled: create, get, the stale and expired records, cancel.

use chrono::{Duration, FixedOffset, SecondsFormat, TimeZone, Utc};
use koe::domain::due::COUNT_STEP;
use koe::domain::reservation::{Reservation, ReservationStatus};
use koe::store::{CancelError, CreateError, Created, Outcome};

use super::{
    DynStore, GRACE, JST, LEAD, claim, create, created_counting, finish, get, get_some,
    missed_before, new_device_id, reservation, scheduled_at, secs, seeded, t0, try_cancel,
    try_create,
};

/// The statuses a call ends in.
const ENDED: [ReservationStatus; 3] = [
    ReservationStatus::Sent,
    ReservationStatus::Failed,
    ReservationStatus::Missed,
];

async fn create_then_get_returns_the_equal_record(store: DynStore) {
    // A caller name beyond ASCII, a fractional second and a non-UTC offset.
    let id = new_device_id();
    let r = Reservation::new(
        id.clone(),
        scheduled_at(t0(), LEAD, JST),
        Some("ミカ 🌸 \"Mika\"".into()),
        t0(),
    );
    create(&store, &r, t0()).await;
    let stored = get_some(&store, &id, t0()).await;
    assert_eq!(stored, r);
    assert_eq!(stored.status, ReservationStatus::Scheduled);
    // A TTL from creation: 8 days after the scheduled time, so an unfinished record goes too.
    assert_eq!(
        stored.expire_at,
        Some((r.scheduled_at.utc() + Duration::days(8)).timestamp()),
        "expireAt from creation"
    );
    assert_eq!(
        stored.scheduled_at.with_offset().offset(),
        &FixedOffset::east_opt(JST).unwrap(),
        "the client's offset is kept"
    );
    assert_eq!(
        stored
            .scheduled_at
            .with_offset()
            .to_rfc3339_opts(SecondsFormat::Millis, false),
        "2035-03-01T09:01:00.123+09:00"
    );

    // No caller name, a negative half-hour offset.
    let id2 = new_device_id();
    let r2 = Reservation::new(
        id2.clone(),
        scheduled_at(t0(), secs(3600), -(3 * 3600 + 1800)),
        None,
        t0(),
    );
    create(&store, &r2, t0()).await;
    let stored2 = get_some(&store, &id2, t0()).await;
    assert_eq!(stored2, r2);
    assert_eq!(stored2.caller_name, None);
    assert_eq!(
        stored2.scheduled_at.with_offset().offset(),
        &FixedOffset::west_opt(3 * 3600 + 1800).unwrap()
    );
}

async fn get_unknown_reservation_is_none(store: DynStore) {
    assert_eq!(get(&store, &new_device_id(), t0()).await, None);
}

/// Another reservation for a device whose call is still to come (scheduled, or claimed by a
/// run): refused as existing, the first kept as it was.
async fn create_while_scheduled_or_claimed_is_exists_and_keeps_the_first(store: DynStore) {
    for (status, after) in [
        (ReservationStatus::Scheduled, secs(10)),
        (ReservationStatus::Claimed, secs(5)),
    ] {
        let (first, since) = seeded(&store, status).await;
        let now = since + after;
        let second = reservation(&first.device_id, now, secs(300));
        let answer = try_create(&store, &second, now).await;
        assert_eq!(answer, Err(CreateError::Exists), "while {status:?}");
        assert_eq!(get(&store, &first.device_id, now).await, Some(first));
    }
}

/// A create made again (its reply lost, or a client's retry of the same reservation): answered
/// as created in every state, counted once (its call id one that raises the count, by 32), and
/// never written over (a claimed or sent call stays as it is).
async fn the_same_reservation_made_again_is_created_once_and_counted_once(store: DynStore) {
    let (r, minute) = created_counting(&store, true).await;
    let id = r.device_id.clone();
    let later = t0() + secs(5);
    create(&store, &r, later).await;
    assert_eq!(store.due_count(&minute).await.unwrap(), COUNT_STEP);
    assert_eq!(get(&store, &id, later).await, Some(r.clone()));

    let due = r.scheduled_at.utc();
    assert!(claim(&store, &r, due).await);
    let claimed = get_some(&store, &id, due).await;
    create(&store, &r, due).await;
    assert_eq!(
        get(&store, &id, due).await,
        Some(claimed),
        "not written over"
    );
    assert!(finish(&store, &r, Outcome::Sent, due + secs(1)).await);
    let sent = get_some(&store, &id, due + secs(1)).await;
    create(&store, &r, due + secs(2)).await;
    assert_eq!(get(&store, &id, due + secs(2)).await, Some(sent));
    assert_eq!(store.due_count(&minute).await.unwrap(), COUNT_STEP);
}

async fn create_replaces_sent_failed_and_missed_records(store: DynStore) {
    for status in ENDED {
        let (old, ended) = seeded(&store, status).await;
        let now = ended + secs(1);
        let new = reservation(&old.device_id, now, secs(600));
        assert!(
            matches!(try_create(&store, &new, now).await, Ok(Created::New { .. })),
            "a {status:?} record is replaced"
        );
        assert_eq!(
            get(&store, &old.device_id, now).await,
            Some(new),
            "after replacing {status:?}"
        );
    }
}

async fn create_replaces_a_stale_scheduled_or_claimed_record(store: DynStore) {
    // Scheduled, never dispatched: its time is exactly `stale_before` → still holds the slot;
    // one millisecond later it is stale and is replaced.
    let (old, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let due = old.scheduled_at.utc();
    let now = due + GRACE;
    let new = reservation(&old.device_id, now, secs(600));
    assert_eq!(
        store.create_reservation(&new, now, due).await,
        Err(CreateError::Exists),
        "time == stale_before is not stale"
    );
    assert_eq!(get(&store, &old.device_id, now).await, Some(old.clone()));
    let later = now + Duration::milliseconds(1);
    assert!(
        matches!(
            try_create(&store, &new, later).await,
            Ok(Created::New { .. })
        ),
        "time < stale_before is stale"
    );
    assert_eq!(get(&store, &old.device_id, later).await, Some(new));

    // Claimed by a run that never finished, long past its time: also replaceable.
    let (old, _) = seeded(&store, ReservationStatus::Claimed).await;
    let now = old.scheduled_at.utc() + GRACE + secs(1);
    let new = reservation(&old.device_id, now, secs(600));
    assert!(
        matches!(try_create(&store, &new, now).await, Ok(Created::New { .. })),
        "a stale claim is replaced"
    );
    assert_eq!(get(&store, &old.device_id, now).await, Some(new));
}

async fn an_expired_terminal_record_reads_as_none_and_is_replaceable(store: DynStore) {
    let (sent, ended) = seeded(&store, ReservationStatus::Sent).await;
    let expire_at = sent.expire_at.expect("a terminal record has expireAt");
    let expiry = Utc.timestamp_opt(expire_at, 0).unwrap();

    let just_before = expiry - secs(1);
    assert_eq!(
        get(&store, &sent.device_id, just_before).await,
        Some(sent.clone()),
        "readable until expireAt"
    );
    assert_eq!(
        get(&store, &sent.device_id, expiry).await,
        None,
        "gone at expireAt ({ended} + retention)"
    );

    let new = reservation(&sent.device_id, expiry, secs(600));
    assert!(matches!(
        try_create(&store, &new, expiry).await,
        Ok(Created::New { .. })
    ));
    assert_eq!(get(&store, &sent.device_id, expiry).await, Some(new));
}

// ---------------------------------------------------------------------------------------------
// Cancel

async fn cancel_scheduled_deletes_it(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let now = t0() + secs(5);
    assert_eq!(try_cancel(&store, &r.device_id, now).await, Ok(()));
    assert_eq!(get(&store, &r.device_id, now).await, None);
    assert_eq!(
        try_cancel(&store, &r.device_id, now).await,
        Err(CancelError::NotFound),
        "a second cancel finds nothing"
    );
}

async fn cancel_without_a_reservation_is_not_found(store: DynStore) {
    assert_eq!(
        store
            .cancel_reservation(&new_device_id(), None, t0(), missed_before(t0()))
            .await,
        Err(CancelError::NotFound)
    );
}

async fn cancel_claimed_is_too_late_and_keeps_it(store: DynStore) {
    let (r, claimed_at) = seeded(&store, ReservationStatus::Claimed).await;
    let now = claimed_at + Duration::milliseconds(10);
    assert_eq!(
        try_cancel(&store, &r.device_id, now).await,
        Err(CancelError::TooLate(ReservationStatus::Claimed))
    );
    assert_eq!(get(&store, &r.device_id, now).await, Some(r));
}

async fn cancel_sent_failed_or_missed_is_too_late_with_its_status(store: DynStore) {
    for status in ENDED {
        let (r, ended) = seeded(&store, status).await;
        let now = ended + secs(60);
        assert_eq!(
            try_cancel(&store, &r.device_id, now).await,
            Err(CancelError::TooLate(status))
        );
        assert_eq!(get(&store, &r.device_id, now).await, Some(r));
    }
}

/// Past grace a `scheduled` call can no longer ring: the cancel's own read answers `missed`
/// (a DELETE reads the record once) and the record stays as it was; at grace it still cancels.
async fn cancel_scheduled_past_grace_is_too_late_missed_and_keeps_it(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let due = r.scheduled_at.utc();
    let late = due + GRACE + Duration::milliseconds(1);
    assert_eq!(
        try_cancel(&store, &r.device_id, late).await,
        Err(CancelError::TooLate(ReservationStatus::Missed))
    );
    assert_eq!(get(&store, &r.device_id, late).await, Some(r.clone()));
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let at_grace = r.scheduled_at.utc() + GRACE;
    assert_eq!(try_cancel(&store, &r.device_id, at_grace).await, Ok(()));
    assert_eq!(get(&store, &r.device_id, at_grace).await, None);
}

async fn cancel_expired_is_not_found(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Sent).await;
    let expiry = Utc
        .timestamp_opt(r.expire_at.expect("expireAt"), 0)
        .unwrap();
    assert_eq!(
        try_cancel(&store, &r.device_id, expiry).await,
        Err(CancelError::NotFound)
    );
}

contract_suite!(
    create_then_get_returns_the_equal_record,
    get_unknown_reservation_is_none,
    create_while_scheduled_or_claimed_is_exists_and_keeps_the_first,
    the_same_reservation_made_again_is_created_once_and_counted_once,
    create_replaces_sent_failed_and_missed_records,
    create_replaces_a_stale_scheduled_or_claimed_record,
    an_expired_terminal_record_reads_as_none_and_is_replaceable,
    cancel_scheduled_deletes_it,
    cancel_without_a_reservation_is_not_found,
    cancel_claimed_is_too_late_and_keeps_it,
    cancel_sent_failed_or_missed_is_too_late_with_its_status,
    cancel_scheduled_past_grace_is_too_late_missed_and_keeps_it,
    cancel_expired_is_not_found,
);
