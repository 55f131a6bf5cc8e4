//! The `Store` contract for what is refused or cancelled (held against both adapters, with
//! `store_contract`'s fixtures): a refused create changes no count, a cancelled reservation
//! never comes back, a cancel made again never cancels a newer one, an expired device record
//! is no record, and a presented secret proves the device.

use chrono::{DateTime, Duration, Utc};
use koe::domain::device::{DEVICE_RETENTION, DeviceId, PushEnvironment};
use koe::domain::due::COUNT_STEP;
use koe::domain::reservation::{CallId, ReservationStatus};
use koe::store::{CancelError, CreateError, Created, DeviceProof, DeviceWrite, Outcome};

use super::count_estimate::call_id_that_counts;
use super::store_contract::{
    DynStore, LEAD, create, created_counting, device, finish, get, get_some, missed_before,
    new_device_id, reservation, secs, t0, try_create,
};

async fn count_of(store: &DynStore, minute: &str) -> u32 {
    store.due_count(minute).await.expect("due_count")
}

/// 300 creates refused (the device's slot is taken), each with a call id that would raise the
/// count (one in 32 does), leave the minute's count as the reservations stored made it: the
/// count sets how many shard queries every dispatch run makes.
async fn refused_creates_leave_the_minutes_count_as_it_was(store: DynStore) {
    let (first, minute) = created_counting(&store, false).await;
    let id = first.device_id;
    assert_eq!(count_of(&store, &minute).await, 0);
    for i in 0..300 {
        let now = t0() + Duration::milliseconds(i);
        let mut refused = reservation(&id, now, LEAD);
        refused.call_id = call_id_that_counts(true);
        assert_eq!(refused.scheduled_at.due_minute(), minute);
        assert_eq!(
            try_create(&store, &refused, now).await,
            Err(CreateError::Exists)
        );
    }
    assert_eq!(
        count_of(&store, &minute).await,
        0,
        "refused creates counted"
    );
    // Another device's create counts (its call id one that does).
    let mut other = reservation(&new_device_id(), t0(), LEAD);
    other.call_id = call_id_that_counts(true);
    create(&store, &other, t0()).await;
    assert_eq!(count_of(&store, &minute).await, COUNT_STEP);
}

/// A cancelled reservation stays cancelled: the same reservation (its `callId`, as a keyed
/// retry makes it) made again is refused as cancelled, reads as none, counts nothing, and its
/// tombstone outlives the device's record being replaced by a newer reservation.
async fn a_cancelled_reservation_is_never_made_again(store: DynStore) {
    // One that would count again if a refused create counted.
    let (r, minute) = created_counting(&store, true).await;
    let id = r.device_id.clone();
    assert!(!store.was_cancelled(&r.call_id, t0()).await.unwrap());
    let now = t0() + secs(5);
    assert_eq!(
        store
            .cancel_reservation(&id, Some(&r.call_id), now, missed_before(now))
            .await,
        Ok(())
    );
    assert_eq!(get(&store, &id, now).await, None);
    assert!(store.was_cancelled(&r.call_id, now).await.unwrap());
    let later = now + secs(5);
    assert_eq!(
        try_create(&store, &r, later).await,
        Err(CreateError::Cancelled)
    );
    assert_eq!(get(&store, &id, later).await, None);
    assert_eq!(count_of(&store, &minute).await, COUNT_STEP, "counted once");
    assert!(
        store.due_calls(&minute, 0).await.unwrap().is_empty(),
        "a cancelled reservation is out of the bucket index"
    );

    // A newer reservation replaces the cancelled record, rings and ends: the tombstone stays.
    let newer = reservation(&id, later, LEAD + secs(1));
    create(&store, &newer, later).await;
    let due = newer.scheduled_at.utc();
    assert!(super::store_contract::claim(&store, &newer, due).await);
    assert!(finish(&store, &newer, Outcome::Sent, due + secs(1)).await);
    assert!(
        store
            .was_cancelled(&r.call_id, due + secs(2))
            .await
            .unwrap()
    );
    assert!(
        !store
            .was_cancelled(&newer.call_id, due + secs(2))
            .await
            .unwrap()
    );
    // Until the reservation's own TTL: past it, it could never have rung.
    let expiry = DateTime::<Utc>::from_timestamp(r.expire_at.expect("expireAt"), 0).unwrap();
    assert!(!store.was_cancelled(&r.call_id, expiry).await.unwrap());
}

/// A cancel names the reservation it cancels: given its `callId`, only that one; without, the
/// one the device holds at the first attempt. Made again after its reply was lost, it answers
/// `Ok` (with its `callId`, even after a newer reservation replaced the cancelled one) and
/// never cancels a reservation made in between.
async fn a_cancel_made_again_never_cancels_a_newer_reservation(store: DynStore) {
    let id = new_device_id();
    let first = reservation(&id, t0(), LEAD);
    create(&store, &first, t0()).await;
    let wrong = CallId::generate();
    assert_eq!(
        store
            .cancel_reservation(&id, Some(&wrong), t0(), missed_before(t0()))
            .await,
        Err(CancelError::NotFound)
    );
    assert_eq!(get_some(&store, &id, t0()).await.call_id, first.call_id);
    let now = t0() + secs(1);
    assert_eq!(
        store
            .cancel_reservation(&id, None, now, missed_before(now))
            .await,
        Ok(())
    );
    // The first attempt's reply lost: made again, the same answer.
    assert_eq!(
        store
            .cancel_reservation(&id, Some(&first.call_id), now, missed_before(now))
            .await,
        Ok(())
    );
    // A reservation made in between survives a cancel made again of the first, which still
    // answers `Ok` (204 again for the one it cancelled: its tombstone says so).
    let second = reservation(&id, now, LEAD + secs(2));
    assert!(matches!(
        try_create(&store, &second, now).await,
        Ok(Created::New { .. })
    ));
    assert_eq!(
        store
            .cancel_reservation(
                &id,
                Some(&first.call_id),
                now + secs(1),
                missed_before(now + secs(1))
            )
            .await,
        Ok(()),
        "a cancel made again of the call it cancelled, after a newer reservation replaced it"
    );
    assert_eq!(
        store
            .cancel_reservation(
                &id,
                Some(&wrong),
                now + secs(1),
                missed_before(now + secs(1))
            )
            .await,
        Err(CancelError::NotFound),
        "a call never cancelled is still not found"
    );
    let kept = get_some(&store, &id, now + secs(1)).await;
    assert_eq!(
        (kept.call_id, kept.status),
        (second.call_id.clone(), ReservationStatus::Scheduled)
    );
    assert_eq!(
        store
            .cancel_reservation(&id, None, now + secs(2), missed_before(now + secs(2)))
            .await,
        Ok(())
    );
    assert_eq!(
        store
            .cancel_reservation(&id, None, now + secs(3), missed_before(now + secs(3)))
            .await,
        Err(CancelError::NotFound),
        "nothing left to cancel"
    );
}

/// A device record past its TTL (`expireAt`, [`DEVICE_RETENTION`] after its last
/// registration) is no record, before DynamoDB deletes it: no token to push to, unregistered
/// for `/calls`, and the next registration is a new one with a new secret.
async fn an_expired_device_record_is_absent_everywhere(store: DynStore) {
    let id = new_device_id();
    let d = device(&id, PushEnvironment::Production, t0());
    let first = store
        .register_device(&d, None, &"a".repeat(64))
        .await
        .unwrap();
    assert_eq!(
        first,
        DeviceWrite::Written {
            issued: true,
            proven: false
        }
    );
    assert!(
        store
            .prove_device(&id, &"a".repeat(64), t0())
            .await
            .unwrap()
    );
    let live = t0() + DEVICE_RETENTION - secs(1);
    assert!(store.get_device(&id, live).await.unwrap().is_some());
    assert!(matches!(
        store.device_proof(&id, live).await.unwrap(),
        DeviceProof::Registered { proven: true, .. }
    ));
    let expired = t0() + DEVICE_RETENTION;
    assert_eq!(store.get_device(&id, expired).await.unwrap(), None);
    assert_eq!(
        store.device_proof(&id, expired).await.unwrap(),
        DeviceProof::Unregistered
    );
    assert!(
        !store
            .prove_device(&id, &"a".repeat(64), expired)
            .await
            .unwrap()
    );
    // Registered anew, whatever the old app presents: a new secret, not yet proven.
    let again = device(&id, PushEnvironment::Production, expired);
    assert_eq!(
        store
            .register_device(&again, Some(&"a".repeat(64)), &"b".repeat(64))
            .await
            .unwrap(),
        DeviceWrite::Written {
            issued: true,
            proven: false
        }
    );
    assert_eq!(
        store.device_proof(&id, expired).await.unwrap(),
        DeviceProof::Registered {
            secret_hash: Some("b".repeat(64)),
            proven: false,
            has_token: true
        }
    );
}

/// Presenting the device's secret proves it (as a `PUT /devices` that presents it does); another
/// secret proves nothing.
async fn a_presented_secret_proves_the_device(store: DynStore) {
    let id = new_device_id();
    let d = device(&id, PushEnvironment::Sandbox, t0());
    let (secret, another) = ("c".repeat(64), "d".repeat(64));
    store.register_device(&d, None, &secret).await.unwrap();
    assert!(!proves(&store, &id, &another).await);
    assert!(!is_proven(&store, &id).await);
    assert!(proves(&store, &id, &secret).await);
    assert!(is_proven(&store, &id).await);
    let unknown = new_device_id();
    assert!(
        !proves(&store, &unknown, &secret).await,
        "no record, nothing proven"
    );
}

/// Whether presenting `secret` proves the device `id`.
async fn proves(store: &DynStore, id: &DeviceId, secret: &str) -> bool {
    store.prove_device(id, secret, t0()).await.unwrap()
}

/// Whether the registered device `id` is proven.
async fn is_proven(store: &DynStore, id: &DeviceId) -> bool {
    match store.device_proof(id, t0()).await.unwrap() {
        DeviceProof::Registered { proven, .. } => proven,
        other => panic!("a registered device: {other:?}"),
    }
}

on_each_store!(
    refused_creates_leave_the_minutes_count_as_it_was,
    a_cancelled_reservation_is_never_made_again,
    a_cancel_made_again_never_cancels_a_newer_reservation,
    an_expired_device_record_is_absent_everywhere,
    a_presented_secret_proves_the_device,
);
