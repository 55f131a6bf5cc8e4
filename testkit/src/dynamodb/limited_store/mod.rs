//! The limits model in-process: a `Store` that is the embedded store plus DynamoDB's
//! per-partition and table-level limits, for benchmarks too big for DynamoDB Local (`bench/dispatch-scale.sh`).
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

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use koe::domain::device::DeviceId;
use koe::domain::reservation::{CallId, Reservation, ScheduledAt};
use koe::store::memory::MemoryStore;
use koe::store::prelude::*;
use koe::store::{Call, Op, StoreError, StoreLayer};
use serde_json::{Value, json};

use super::limits::{Capacity, Charge, Consumed, Item, LimitsModel, TableDef, write_charges};

/// The SDK's attempts of one request (standard retry mode).
pub(super) const ATTEMPTS: u32 = 3;
/// The SDK's backoff base: before retry n, a uniform draw from `0..BASE * 2^(n-1)`.
pub(super) const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// The adapter's whole-operation budget (`koe::store::dynamodb::OPERATION_TIMEOUT`).
const OPERATION_BUDGET: Duration = koe::store::dynamodb::OPERATION_TIMEOUT;

/// What a run token looks like in an item (`RunToken`: 32 hex digits), for sizes.
const TOKEN: &str = "0123456789abcdef0123456789abcdef";

type Time = DateTime<Utc>;

/// The embedded store behind DynamoDB's per-partition and table-level limits.
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
    /// The units charged so far, by the store request (`Op::name`) they were charged to.
    consumed: std::sync::Mutex<BTreeMap<&'static str, Consumed>>,
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
            consumed: std::sync::Mutex::default(),
        }
    }

    /// `inner` behind the limits model on tokio's time, its tables' write throughput held to
    /// `write_units` a second (the crowded-second tests' table; the dispatcher's
    /// `write_budget` is set to match).
    pub fn on_write_budget(inner: Arc<MemoryStore>, write_units: u32) -> LimitedStore {
        let limits = super::limits::Limits {
            table_write_units: f64::from(write_units),
            ..super::limits::Limits::default()
        };
        LimitedStore::new(inner, LimitsModel::on_tokio_time(limits))
    }

    pub fn model(&self) -> &LimitsModel {
        &self.model
    }

    /// The units charged so far (throttled attempts not included), by store request
    /// (`Op::name`: `ClaimDue`, `DueCalls`, ...), every table and index together.
    pub fn consumed_by_request(&self) -> BTreeMap<&'static str, Consumed> {
        self.consumed.lock().unwrap().clone()
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

    /// What a reservation's item and its index entry both hold: its keys, its time and when its
    /// next push is due (`due_at`, the index's sort key: moved by a confirming device's pushed
    /// outcome, as the adapter moves it).
    fn call_base(device: &DeviceId, call: &CallId, at: &ScheduledAt, due_at: Time) -> Item {
        Item::from([
            ("deviceId".to_owned(), s(device.as_str())),
            ("callId".to_owned(), s(call.as_str())),
            ("scheduledAt".to_owned(), s(&at.with_offset().to_rfc3339())),
            ("scheduledAtMs".to_owned(), n(due_at.timestamp_millis())),
        ])
    }

    /// The reservation's item as the adapter writes it, in the index partition `due_key`.
    pub fn call_item(r: &Reservation, due_key: Option<&str>) -> Item {
        let mut item = Self::call_base(&r.device_id, &r.call_id, &r.scheduled_at, r.due_at);
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
        // Kept from creation for the notice's release: the size of one of its minute's keys.
        let minute = r.scheduled_at.due_minute();
        put("noticeShard", s(&koe::domain::due::shard_key(&minute, 0)));
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
        if let Some(at) = r.mark_batch {
            put("markBatchMs", n(at.timestamp_millis()));
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
            let mut consumed = self.consumed.lock().unwrap();
            let units = consumed.entry(op.name()).or_default();
            for charge in &charges {
                match charge.capacity {
                    Capacity::Write => units.wcu += charge.units,
                    Capacity::Read => units.rcu += charge.units,
                }
            }
        }
        call().await
    }
}

mod costs;
