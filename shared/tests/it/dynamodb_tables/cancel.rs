//! A cancel tells a missing or expired reservation from one too late.

use chrono::Duration;
use koe::domain::reservation::{Reservation, ReservationStatus, RunToken, ScheduledAt};
use koe::store::prelude::*;
use koe::store::{CancelError, Outcome};

use super::{at, device_id, store};
use crate::store_contract::missed_before;

#[tokio::test]
async fn cancel_tells_missing_and_expired_from_too_late() {
    let (_client, _tables, store) = store().await;
    let now = at("2026-01-01T00:00:00Z");
    let id = device_id("d-cancel");
    let stale_before = now - Duration::minutes(2);
    // A cancel of the device's reservation, whichever it holds, at `when`.
    let cancel = async |when| {
        store
            .cancel_reservation(&id, None, when, missed_before(when))
            .await
    };
    assert_eq!(cancel(now).await, Err(CancelError::NotFound));

    let at_time = ScheduledAt::parse("scheduledAt", "2026-01-01T00:01:00Z", now).unwrap();
    let r = Reservation::new(id.clone(), at_time, None, now);
    store
        .create_reservation(&r, now, stale_before)
        .await
        .unwrap();
    cancel(now).await.unwrap();
    assert_eq!(store.get_reservation(&id, now).await.unwrap(), None);

    let r = Reservation::new(id.clone(), at_time, None, now);
    store
        .create_reservation(&r, now, stale_before)
        .await
        .unwrap();
    let claim_at = at("2026-01-01T00:01:00Z");
    let abandoned = claim_at - Duration::seconds(60);
    assert!(
        store
            .claim_reservation(&id, &r.call_id, &RunToken::generate(), claim_at, abandoned)
            .await
            .unwrap()
    );
    assert_eq!(
        cancel(claim_at).await,
        Err(CancelError::TooLate(ReservationStatus::Claimed))
    );
    assert!(
        store
            .finish_reservation(
                &id,
                &r.call_id,
                Outcome::Failed,
                &RunToken::generate(),
                claim_at,
                abandoned,
            )
            .await
            .unwrap()
    );
    assert_eq!(
        cancel(claim_at).await,
        Err(CancelError::TooLate(ReservationStatus::Failed))
    );
    // Past its TTL the record counts as gone, even though DynamoDB has not deleted it yet.
    let later = claim_at + Duration::days(7);
    assert_eq!(cancel(later).await, Err(CancelError::NotFound));
    assert_eq!(store.get_reservation(&id, later).await.unwrap(), None);
}
