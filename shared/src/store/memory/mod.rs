//! The embedded store for local runs and fast tests: the same rules as DynamoDB, under one lock.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{CancelError, ConfirmAnswer, CreateError, Created, IdempotentAnswer, StoreError};
use crate::domain::device::{Device, DeviceId};
use crate::domain::reservation::{CallId, Reservation, ReservationStatus};
use crate::store::prelude::*;

mod devices;
mod dispatch;
mod due;
mod usage;

#[derive(Default)]
struct Tables {
    devices: HashMap<DeviceId, Device>,
    reservations: HashMap<DeviceId, Reservation>,
    /// (device, day) → (count, expireAt)
    usage: HashMap<(DeviceId, String), (u32, i64)>,
    /// plan id → (answers, expireAt)
    plan_answers: HashMap<String, (u32, i64)>,
    idempotent_answers: HashMap<String, IdempotentAnswer>,
    /// (api, day) → tokens counted
    spend: HashMap<(String, String), i64>,
    /// (api, day) of the ceilings already noticed
    notices: std::collections::HashSet<(String, String)>,
    /// device → (SHA-256 of its secret, proven)
    device_secrets: HashMap<DeviceId, (String, bool)>,
    /// device → its record's TTL (epoch seconds), from its last registration
    device_expiry: HashMap<DeviceId, i64>,
    /// cancelled call → its tombstone's TTL (epoch seconds)
    cancelled_calls: HashMap<CallId, i64>,
    /// minute → reservations made for it
    due_counts: HashMap<String, u32>,
    /// minute → until when a run promised to select it again
    watches: HashMap<String, DateTime<Utc>>,
    /// minute → the call whose create claimed its last wake
    wake_claimants: HashMap<String, String>,
    /// The bucket index: shard key → the devices whose reservation is in it while `scheduled`
    /// or `claimed`, and each such device's shard key.
    due_index: HashMap<String, std::collections::HashSet<DeviceId>>,
    due_keys: HashMap<DeviceId, String>,
}

#[derive(Default)]
pub struct MemoryStore {
    tables: Mutex<Tables>,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// The bucket-index partition (`<minute>#<shard>`) the device's reservation is in, while it
    /// is `scheduled` or `claimed` (what DynamoDB's item carries as `dueShard`; for the limits
    /// model in `koe_testkit`).
    pub fn due_key(&self, id: &DeviceId) -> Option<String> {
        self.lock().due_keys.get(id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        // A panic while holding the lock cannot leave a half-written record (every write is one
        // insert/remove), so a poisoned lock is safe to reuse.
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl ReservationStore for MemoryStore {
    async fn create_reservation(
        &self,
        reservation: &Reservation,
        now: DateTime<Utc>,
        stale_before: DateTime<Utc>,
    ) -> Result<Created, CreateError> {
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
                || existing.scheduled_at.utc() < stale_before;
            if !replaceable {
                return Err(CreateError::Exists);
            }
        }
        tables.index_due(reservation);
        tables
            .reservations
            .insert(reservation.device_id.clone(), reservation.clone());
        Ok(Created::New)
    }

    async fn get_reservation(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<Option<Reservation>, StoreError> {
        Ok(self
            .lock()
            .reservations
            .get(id)
            .filter(|r| !r.is_expired(now) && r.status != ReservationStatus::Cancelled)
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

    async fn cancel_reservation(
        &self,
        id: &DeviceId,
        call_id: Option<&CallId>,
        now: DateTime<Utc>,
    ) -> Result<(), CancelError> {
        self.lock().cancel(id, call_id, now)
    }

    async fn confirm_call(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        now: DateTime<Utc>,
    ) -> Result<ConfirmAnswer, StoreError> {
        Ok(self.lock().confirm(id, call_id, now))
    }
}
