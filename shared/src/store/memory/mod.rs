//! The embedded store for local runs and fast tests: the same rules as DynamoDB, under one lock.
//! Each port is implemented in its file: `devices`, `reservations`, `dispatch` (with the bucket
//! index in `due`), `usage` (counters and kept answers).

use std::collections::HashMap;
use std::sync::Mutex;

use chrono::{DateTime, Utc};

use super::IdempotentAnswer;
use crate::domain::device::{Device, DeviceId};
use crate::domain::reservation::{CallId, Reservation, RunToken};

mod devices;
mod dispatch;
mod due;
mod reservations;
mod usage;

#[derive(Default)]
struct Tables {
    devices: HashMap<DeviceId, Device>,
    reservations: HashMap<DeviceId, Reservation>,
    /// The usage counters, by their DynamoDB key ([`UsageRequest::counter`](crate::store::UsageRequest::counter)):
    /// (`deviceId`, `day`) → (count, expireAt)
    counters: HashMap<(String, String), (i64, i64)>,
    idempotent_answers: HashMap<String, IdempotentAnswer>,
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
    /// The dispatcher's sweep mark: every minute before it selected.
    swept_before: Option<DateTime<Utc>>,
    /// The bucket index: shard key → the devices whose reservation is in it while `scheduled`
    /// or `claimed`, and each such device's shard key.
    due_index: HashMap<String, std::collections::HashSet<DeviceId>>,
    due_keys: HashMap<DeviceId, String>,
    /// The shard key each device's reservation was put in, kept after it leaves the index
    /// (DynamoDB's `noticeShard`): where its notice's release puts it back.
    notice_keys: HashMap<DeviceId, String>,
    /// A run's batch of pushes (run, batch; DynamoDB's `mark#` items) → its mark or the fence
    /// another run put on it.
    batches: HashMap<(RunToken, DateTime<Utc>), super::BatchFence>,
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

    /// The bucket-index partition the device's reservation was put in, kept for its notice's
    /// release (what DynamoDB's item carries as `noticeShard`; for the limits model).
    pub fn notice_key(&self, id: &DeviceId) -> Option<String> {
        self.lock().notice_keys.get(id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        // A panic while holding the lock cannot leave a half-written record (every write is one
        // insert/remove), so a poisoned lock is safe to reuse.
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }
}
