//! The embedded store's reservations port: a device's one reservation, its create, read and
//! cancel (to a tombstone its `callId` is remembered by), and the device's confirmation.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::MemoryStore;
use crate::domain::device::DeviceId;
use crate::domain::reservation::{CallId, Reservation, ReservationStatus, terminal_expiry};
use crate::store::prelude::*;
use crate::store::{
    CancelError, CancelRequest, ConfirmAnswer, ConfirmRequest, CreateError, CreateRequest, Created,
    StoreError,
};

#[async_trait]
impl ReservationStore for MemoryStore {
    async fn create(&self, create: CreateRequest<'_>) -> Result<Created, CreateError> {
        let (reservation, now) = (create.reservation, create.now);
        let mut tables = self.lock();
        if let Some(existing) = tables.reservations.get(&reservation.device_id) {
            if existing.call_id == reservation.call_id && !existing.is_expired(now) {
                if existing.status == ReservationStatus::Cancelled {
                    return Err(CreateError::Cancelled);
                }
                // This very reservation again (a retry): created already, counted once.
                return Ok(Created::Already(Box::new(existing.clone())));
            }
            let replaceable = existing.status.is_terminal()
                || existing.is_expired(now)
                || existing.scheduled_at.utc() < create.stale_before;
            if !replaceable {
                return Err(CreateError::Exists);
            }
        }
        let minute_count = tables.index_due(reservation);
        tables
            .reservations
            .insert(reservation.device_id.clone(), reservation.clone());
        Ok(Created::New { minute_count })
    }

    async fn reservation_record(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<Option<Reservation>, StoreError> {
        let tables = self.lock();
        Ok(tables
            .reservations
            .get(id)
            .filter(|r| !r.is_expired(now))
            .cloned())
    }

    async fn was_cancelled(
        &self,
        call_id: &CallId,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Ok(self
            .lock()
            .cancelled_calls
            .get(call_id)
            .is_some_and(|t| *t > now.timestamp()))
    }

    /// `scheduled` (no push left) → `cancelled`, kept as the call's
    /// tombstone; its `callId` remembered until its TTL.
    async fn cancel(&self, cancel: CancelRequest<'_>) -> Result<(), CancelError> {
        let (id, call_id, now) = (cancel.id, cancel.call_id, cancel.now);
        let tables = &mut *self.lock();
        let r = match tables.reservations.get_mut(id) {
            Some(r) if !r.is_expired(now) && call_id.is_none_or(|c| c == &r.call_id) => r,
            // A call the device no longer holds: cancelled before (a DELETE made again after a
            // newer reservation replaced it) while its tombstone lives.
            _ => {
                let entombed = |c: &CallId| {
                    tables
                        .cancelled_calls
                        .get(c)
                        .is_some_and(|t| *t > now.timestamp())
                };
                return match call_id {
                    Some(c) if entombed(c) => Ok(()),
                    _ => Err(CancelError::NotFound),
                };
            }
        };
        if !CancelError::check(r, call_id.is_some(), cancel.missed_before)? {
            return Ok(());
        }
        r.status = ReservationStatus::Cancelled;
        r.updated_at = now;
        let (call, expire_at) = (r.call_id.clone(), r.expire_at.unwrap_or(i64::MAX));
        tables.unindex(id);
        tables.cancelled_calls.insert(call, expire_at);
        Ok(())
    }

    async fn confirm(&self, confirm: ConfirmRequest<'_>) -> Result<ConfirmAnswer, StoreError> {
        let ConfirmRequest { id, call_id, now } = confirm;
        let tables = &mut *self.lock();
        let Some(r) = tables.call_mut(id, call_id).filter(|r| !r.is_expired(now)) else {
            return Ok(ConfirmAnswer::NotFound);
        };
        let marked = r.push_started_at.is_some();
        let confirmable = match r.status {
            ReservationStatus::Rang => return Ok(ConfirmAnswer::Rang(Box::new(r.clone()))),
            ReservationStatus::Sent | ReservationStatus::Unconfirmed => true,
            ReservationStatus::Scheduled => r.pushes > 0,
            ReservationStatus::Claimed if r.pushes > 0 && marked => {
                return Ok(ConfirmAnswer::PushInFlight);
            }
            ReservationStatus::Claimed => r.pushes > 0 || marked || r.mark_batch.is_some(),
            _ => false,
        };
        if !confirmable {
            return Ok(ConfirmAnswer::NotFound);
        }
        // A push left: at least one (its first, confirmed before its run recorded it).
        r.pushes = r.pushes.max(1);
        r.status = ReservationStatus::Rang;
        r.rang_at = Some(now);
        r.updated_at = now;
        r.expire_at = Some(terminal_expiry(now));
        let rang = Box::new(r.clone());
        tables.unindex(id);
        Ok(ConfirmAnswer::Rang(rang))
    }
}
