//! The limits model in-process: a `Store` that is the embedded store plus DynamoDB's
//! per-partition limits, for benchmarks too big for DynamoDB Local (`bench/dispatch-scale.sh`).
//!
//! Every request the dispatcher makes is costed as the DynamoDB adapter's request would be (the
//! same costing as `limits_proxy`: `write_charges` on the item before and after, `read_charge`
//! on what a read evaluates, against the tables of `template.yaml`) and charged to the
//! [`LimitsModel`] before it is carried out. A request the model throttles is not carried out;
//! it is retried as the SDK retries a `ThrottlingException` (standard mode: 3 attempts, full
//! jitter from a 1 s base, within the adapter's 3 s operation budget), and then fails as a store
//! error. The item images are built here from the records (the adapter's layout, tokens
//! included), so their sizes are close to, not exactly, the real items'.
//!
//! What the API writes (devices, reservations: the benchmark's set-up, made hours ahead in
//! production) goes to the embedded store uncharged; only the dispatcher's requests are costed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use koe::domain::device::DeviceId;
use koe::domain::due::shard_key;
use koe::domain::reservation::{
    CallId, Reservation, ReservationStatus, RunToken, ScheduledAt, terminal_expiry,
};
use koe::store::memory::MemoryStore;
use koe::store::prelude::*;
use koe::store::{Call, DUE_INDEX, Op, Outcome, StoreError, StoreLayer};
use serde_json::{Value, json};

use super::limits::{Charge, Item, LimitsModel, TableDef, read_charge, write_charges};

/// The SDK's attempts of one request (standard retry mode).
pub(super) const ATTEMPTS: u32 = 3;
/// The SDK's backoff base: before retry n, a uniform draw from `0..BASE * 2^(n-1)`.
pub(super) const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// The adapter's whole-operation budget (`koe::store::dynamodb::OPERATION_TIMEOUT`).
const OPERATION_BUDGET: Duration = koe::store::dynamodb::OPERATION_TIMEOUT;

/// What a run token looks like in an item (`RunToken`: 32 hex digits), for sizes.
const TOKEN: &str = "0123456789abcdef0123456789abcdef";

type Time = DateTime<Utc>;

/// The embedded store behind DynamoDB's per-partition limits.
pub struct LimitedStore {
    inner: Arc<MemoryStore>,
    model: LimitsModel,
    calls: TableDef,
    devices: TableDef,
    /// The charges of each of the dispatcher's usual writes (claim of a `scheduled` call, mark,
    /// finish of a `claimed` one), costed once on the first call's items and then reused with
    /// each call's own keys: the items differ only in a few bytes, and costing every write from
    /// its items would make the benchmark's CPU, not DynamoDB's limits, the bottleneck.
    usual: std::sync::Mutex<HashMap<&'static str, Vec<(Charge, Keyed)>>>,
}

/// Which key a usual write's charge goes to.
#[derive(Clone, Copy)]
enum Keyed {
    Device,
    Due,
}

impl LimitedStore {
    /// `inner` as it is (seed it first: its writes are not charged), behind `model`.
    pub fn new(inner: Arc<MemoryStore>, model: LimitsModel) -> LimitedStore {
        LimitedStore {
            inner,
            model,
            calls: TableDef::from_template("CallsTable", "calls"),
            devices: TableDef::from_template("DevicesTable", "devices"),
            usual: std::sync::Mutex::new(HashMap::new()),
        }
    }

    pub fn model(&self) -> &LimitsModel {
        &self.model
    }

    /// Charges `charges` as the SDK would send the request in `attempts`: throttled attempts
    /// retried with backoff, then a store error.
    async fn charged(
        &self,
        operation: &str,
        charges: &[Charge],
        attempts: u32,
    ) -> Result<(), StoreError> {
        let started = tokio::time::Instant::now();
        let mut attempt = 1;
        loop {
            let throttled = match self.model.charge(operation, charges) {
                Ok(()) => return Ok(()),
                Err(throttled) => throttled,
            };
            let pause = BACKOFF_BASE.mul_f64(fastrand::f64() * f64::from(1u32 << (attempt - 1)));
            if attempt == attempts || started.elapsed() + pause >= OPERATION_BUDGET {
                return Err(StoreError::throttled(format!(
                    "{operation}: ThrottlingException after {attempt} attempts: {throttled}"
                )));
            }
            tokio::time::sleep(pause).await;
            attempt += 1;
        }
    }

    fn call_key(id: &DeviceId) -> Item {
        Item::from([("deviceId".to_owned(), s(id.as_str()))])
    }

    /// What a reservation's item and its index entry both hold: its keys and its time.
    fn call_base(device: &DeviceId, call: &CallId, at: &ScheduledAt) -> Item {
        Item::from([
            ("deviceId".to_owned(), s(device.as_str())),
            ("callId".to_owned(), s(call.as_str())),
            ("scheduledAt".to_owned(), s(&at.with_offset().to_rfc3339())),
            ("scheduledAtMs".to_owned(), n(at.utc().timestamp_millis())),
        ])
    }

    /// The reservation's item as the adapter writes it, in the index partition `due_key`.
    fn call_item(r: &Reservation, due_key: Option<&str>) -> Item {
        let mut item = Self::call_base(&r.device_id, &r.call_id, &r.scheduled_at);
        item.extend([
            ("status".to_owned(), s(r.status.as_str())),
            ("createdAt".to_owned(), s("2026-01-01T00:00:00.000Z")),
            ("updatedAt".to_owned(), s("2026-01-01T00:00:00.000Z")),
        ]);
        let mut put = |name: &str, value: Value| {
            item.insert(name.to_owned(), value);
        };
        if let Some(key) = due_key {
            put("dueShard", s(key));
        }
        if let Some(name) = &r.caller_name {
            put("callerName", s(name));
        }
        if let Some(at) = r.claimed_at {
            put("claimedAtMs", n(at.timestamp_millis()));
            put("claimToken", s(TOKEN));
        }
        if let Some(at) = r.push_started_at {
            put("pushStartedAtMs", n(at.timestamp_millis()));
        }
        if let Some(at) = r.expire_at {
            put("expireAt", n(at));
        }
        if r.status.is_terminal() {
            put("finishToken", s(TOKEN));
        }
        item
    }

    /// The device's reservation as an item, with its index partition, if it has one.
    async fn current(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<Option<(Reservation, Option<String>)>, StoreError> {
        let due_key = self.inner.due_key(id);
        Ok(self
            .inner
            .get_reservation(id, now)
            .await?
            .map(|r| (r, due_key)))
    }

    /// The charges of an update of the device's reservation from `before` to `after`; `usual`
    /// names a write whose charges are reused from its first costing (see
    /// [`LimitedStore::usual`]).
    fn update(
        &self,
        id: &DeviceId,
        usual: Option<&'static str>,
        before: Option<&(Reservation, Option<String>)>,
        after: Option<(&Reservation, Option<&str>)>,
    ) -> Vec<Charge> {
        let due = before.and_then(|(_, key)| key.clone());
        let cost = || {
            let before = before.map(|(r, key)| Self::call_item(r, key.as_deref()));
            let after = after.map(|(r, key)| Self::call_item(r, key));
            write_charges(
                &self.calls,
                &Self::call_key(id),
                before.as_ref(),
                after.as_ref(),
            )
        };
        match (usual, &due) {
            (Some(name), Some(due)) => self.reused(name, id.as_str(), due, cost),
            _ => cost(),
        }
    }

    /// The usual write `name`'s charges with this call's keys (costed by `cost` the first time).
    fn reused(
        &self,
        name: &'static str,
        device: &str,
        due: &str,
        cost: impl FnOnce() -> Vec<Charge>,
    ) -> Vec<Charge> {
        let mut usual = self.usual.lock().unwrap();
        let template = usual.entry(name).or_insert_with(|| {
            cost()
                .into_iter()
                .map(|c| {
                    let keyed = if c.key == device {
                        Keyed::Device
                    } else {
                        assert_eq!(c.key, due, "a usual write charges the device or its shard");
                        Keyed::Due
                    };
                    (c, keyed)
                })
                .collect()
        });
        template
            .iter()
            .map(|(c, keyed)| Charge {
                key: match keyed {
                    Keyed::Device => device.to_owned(),
                    Keyed::Due => due.to_owned(),
                },
                ..c.clone()
            })
            .collect()
    }
}

fn s(value: &str) -> Value {
    json!({ "S": value })
}

fn n(value: i64) -> Value {
    json!({ "N": value.to_string() })
}

#[async_trait]
impl StoreLayer for LimitedStore {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    /// The dispatcher's requests are charged before they are carried out; a throttled one is not
    /// carried out. The API's requests pass uncharged.
    async fn around<T, E>(&self, op: Op<'_>, call: Call<'_, T, E>) -> Result<T, E>
    where
        T: Send,
        E: From<StoreError> + Send,
    {
        if let Some((charges, attempts)) = self.cost(op).await? {
            let operation = op.request().as_str();
            self.charged(operation, &charges, attempts).await?;
        }
        call().await
    }
}

impl LimitedStore {
    /// What the adapter's request for `op` costs on the records as they are, and the attempts
    /// it is sent with: once for the dispatcher's requests on a call (its dispatch client has
    /// no SDK retries: the dispatcher makes them again itself), the SDK's for the others.
    /// `None` for the API's requests.
    async fn cost(&self, op: Op<'_>) -> Result<Option<(Vec<Charge>, u32)>, StoreError> {
        let cost = match op {
            Op::GetDevice(id, now) => (self.device_read(id, now).await?, 1),
            Op::RemoveDevice(id, _) => {
                // A dead token's removal: one conditional write on the device's key.
                let key = Item::from([("deviceId".to_owned(), s(id.as_str()))]);
                let charges = write_charges(&self.devices, &key, Some(&key), None);
                (charges, ATTEMPTS)
            }
            Op::GetReservation(id, now) => {
                // The record a miss was refused on: consistent, on the device's key.
                let current = self.current(id, now).await?;
                let item = current
                    .as_ref()
                    .map(|(r, key)| Self::call_item(r, key.as_deref()));
                let charge = read_charge(&self.calls, None, id.as_str(), item.as_ref(), true);
                (vec![charge], ATTEMPTS)
            }
            Op::ConfirmCall(id, _, now) => (self.confirm(id, now).await?, 1),
            Op::DueCount(minute) => (self.count_read(minute).await?, ATTEMPTS),
            Op::WatchMinute(minute, _) | Op::ClaimWake(minute, ..) => {
                // A run's watch, a create's claim of a wake: one small conditional update of
                // the minute's count item (a refusal pays its write too).
                let key = Item::from([("deviceId".to_owned(), s(&format!("due#{minute}")))]);
                let charges = write_charges(&self.calls, &key, Some(&key), Some(&key));
                (charges, ATTEMPTS)
            }
            Op::DueCalls(minute, shard) => (self.shard_query(minute, shard).await?, ATTEMPTS),
            Op::ClaimDue(id, call_id, run, now, abandoned_before) => (
                self.claim(id, call_id, run, now, abandoned_before).await?,
                1,
            ),
            Op::MarkPushStarted(id, _, _, now, _) => (self.mark(id, now).await?, 1),
            Op::ReleaseClaim(id, _, _, now) => (self.release(id, now).await?, 1),
            Op::FinishReservation(id, _, outcome, _, now, _) => {
                (self.finish(id, outcome, now).await?, 1)
            }
            _ => return Ok(None),
        };
        Ok(Some(cost))
    }

    /// The dispatcher's device read, 2 s before the second: consistent, on the device's key.
    async fn device_read(&self, id: &DeviceId, now: Time) -> Result<Vec<Charge>, StoreError> {
        let device = self.inner.get_device(id, now).await?;
        let item = device.as_ref().map(|d| {
            Item::from([
                ("deviceId".to_owned(), s(d.device_id.as_str())),
                ("voipToken".to_owned(), s(d.voip_token.expose())),
                ("environment".to_owned(), s(d.environment.as_str())),
                ("updatedAt".to_owned(), s("2026-01-01T00:00:00.000Z")),
                ("secretHash".to_owned(), s(&"0".repeat(64))),
                ("secretProven".to_owned(), json!({ "BOOL": true })),
            ])
        });
        let mut charge = read_charge(&self.devices, None, id.as_str(), item.as_ref(), true);
        charge.key = id.as_str().to_owned();
        Ok(vec![charge])
    }

    /// A confirmation: one conditional update on the device's key, out of the index.
    async fn confirm(&self, id: &DeviceId, now: Time) -> Result<Vec<Charge>, StoreError> {
        let before = self.current(id, now).await?;
        let after = before.as_ref().map(|(r, _)| {
            let mut rang = r.clone();
            rang.status = ReservationStatus::Rang;
            rang.rang_at = Some(now);
            rang.expire_at = Some(terminal_expiry(now));
            rang
        });
        let after_ref = after.as_ref().map(|r| (r, None));
        Ok(self.update(id, None, before.as_ref(), after_ref))
    }

    /// A minute's count: eventually consistent, on its own key (`due#<minute>`).
    async fn count_read(&self, minute: &str) -> Result<Vec<Charge>, StoreError> {
        let count = self.inner.due_count(minute).await?;
        let key = format!("due#{minute}");
        let item = Item::from([
            ("deviceId".to_owned(), s(&key)),
            ("count".to_owned(), n(i64::from(count))),
            ("expireAt".to_owned(), n(1_800_000_000)),
        ]);
        let charge = read_charge(&self.calls, None, &key, (count > 0).then_some(&item), false);
        Ok(vec![charge])
    }

    /// A shard's query: eventually consistent, on the index partition, for every entry in it.
    async fn shard_query(&self, minute: &str, shard: u32) -> Result<Vec<Charge>, StoreError> {
        let calls = self.inner.due_calls(minute, shard).await?;
        let key = shard_key(minute, shard);
        let gsi = self.calls.gsi(DUE_INDEX).expect("the bucket index");
        let entries: Vec<Item> = calls
            .iter()
            .filter_map(|c| {
                let mut item = Self::call_base(&c.device_id, &c.call_id, &c.scheduled_at);
                item.insert("dueShard".to_owned(), s(&key));
                if let Some(name) = &c.caller_name {
                    item.insert("callerName".to_owned(), s(name));
                }
                self.calls.projected(gsi, &item)
            })
            .collect();
        let charge = read_charge(&self.calls, Some(DUE_INDEX), &key, &entries, false);
        Ok(vec![charge])
    }

    async fn claim(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: Time,
        abandoned_before: Time,
    ) -> Result<Vec<Charge>, StoreError> {
        let before = self.current(id, now).await?;
        let after = before.as_ref().and_then(|(r, key)| {
            let claimable = &r.call_id == call_id
                && match r.status {
                    ReservationStatus::Scheduled => true,
                    ReservationStatus::Claimed => {
                        r.claimed_by.as_ref() == Some(run)
                            || (r.push_started_at.is_none()
                                && r.claimed_at.is_some_and(|c| c < abandoned_before))
                    }
                    _ => false,
                };
            claimable.then(|| {
                let mut claimed = r.clone();
                claimed.status = ReservationStatus::Claimed;
                claimed.claimed_at = Some(now);
                (claimed, key.clone())
            })
        });
        // A refused condition still writes (and pays) the item as it was.
        let usual = before
            .as_ref()
            .is_some_and(|(r, _)| r.status == ReservationStatus::Scheduled && after.is_some());
        let after_ref = match &after {
            Some((r, key)) => Some((r, key.as_deref())),
            None => before.as_ref().map(|(r, key)| (r, key.as_deref())),
        };
        Ok(self.update(id, usual.then_some("claim"), before.as_ref(), after_ref))
    }

    async fn mark(&self, id: &DeviceId, now: Time) -> Result<Vec<Charge>, StoreError> {
        let before = self.current(id, now).await?;
        let after = before.as_ref().map(|(r, key)| {
            let mut marked = r.clone();
            marked.push_started_at = Some(now);
            (marked, key.clone())
        });
        let usual = before.as_ref().is_some_and(|(r, _)| {
            r.status == ReservationStatus::Claimed && r.push_started_at.is_none()
        });
        let after_ref = after.as_ref().map(|(r, key)| (r, key.as_deref()));
        Ok(self.update(id, usual.then_some("mark"), before.as_ref(), after_ref))
    }

    async fn release(&self, id: &DeviceId, now: Time) -> Result<Vec<Charge>, StoreError> {
        let before = self.current(id, now).await?;
        let after = before.as_ref().map(|(r, key)| {
            let mut released = r.clone();
            released.status = ReservationStatus::Scheduled;
            released.claimed_at = None;
            released.push_started_at = None;
            (released, key.clone())
        });
        let after_ref = after.as_ref().map(|(r, key)| (r, key.as_deref()));
        Ok(self.update(id, None, before.as_ref(), after_ref))
    }

    async fn finish(
        &self,
        id: &DeviceId,
        outcome: Outcome,
        now: Time,
    ) -> Result<Vec<Charge>, StoreError> {
        let before = self.current(id, now).await?;
        let after = before.as_ref().map(|(r, key)| {
            let mut finished = r.clone();
            finished.status = outcome.status();
            if let Outcome::Pushed { next_at, pushes } = outcome {
                // Due again: its index entry stays, its sort key moves.
                finished.pushes = pushes;
                finished.due_at = next_at;
                finished.claimed_at = None;
                finished.claimed_by = None;
                finished.push_started_at = None;
                return (finished, key.clone());
            }
            finished.expire_at = Some(terminal_expiry(now));
            (finished, None)
        });
        let usual = before.as_ref().is_some_and(|(r, _)| {
            r.status == ReservationStatus::Claimed && r.push_started_at.is_some()
        });
        let name = match outcome {
            Outcome::Sent => "finish sent",
            Outcome::Failed => "finish failed",
            Outcome::Missed => "finish missed",
            Outcome::Pushed { .. } => "finish pushed",
            Outcome::Unconfirmed => "finish unconfirmed",
        };
        let after_ref = after.as_ref().map(|(r, key)| (r, key.as_deref()));
        Ok(self.update(id, usual.then_some(name), before.as_ref(), after_ref))
    }
}
