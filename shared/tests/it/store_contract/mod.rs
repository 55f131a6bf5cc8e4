//! The contract of the `Store` port (`koe::store::Store`), held against every adapter.
//!
//! Each contract test is one adapter-agnostic `async fn name(store: Arc<dyn Store>)` in this
//! folder's file for its concern; `contract_suite!` instantiates all of them once per adapter
//! (`mod memory`, `mod dynamodb`), so both adapters answer to exactly the same assertions.
//!
//! Conventions:
//! - Time is always explicit (`now` handed to the store, as the app's `Clock` does), starting at
//!   [`t0`] in 2035 so that TTLs set by the tests never lapse by the wall clock (DynamoDB itself
//!   must never delete a record a test still reads). Times carry milliseconds: adapters round-trip
//!   timestamps to the millisecond.
//! - Device ids are random, so tests never collide even on shared tables.
//! - `stale_before` = now − [`GRACE`], `abandoned_before` = now − [`CLAIM_TIMEOUT`], as the
//!   dispatcher computes them.

use std::sync::Arc;

use chrono::{DateTime, Duration, FixedOffset, SecondsFormat, TimeZone, Utc};
use koe::domain::device::{Device, DeviceId, PushEnvironment, VoipToken};
use koe::domain::reservation::{CallId, Reservation, ReservationStatus, RunToken, ScheduledAt};
use koe::store::prelude::*;
use koe::store::{CancelError, CreateError, Created, Outcome};
use koe_testkit::on_call::OnCall;

pub(super) type DynStore = Arc<dyn Store>;

/// A scheduled reservation this far past its time can no longer be sent (app default 120 s).
pub(super) const GRACE: Duration = Duration::seconds(120);
/// A claim this old counts as abandoned (its run died).
pub(super) const CLAIM_TIMEOUT: Duration = Duration::seconds(30);
/// How far ahead the standard test reservation is made.
pub(super) const LEAD: Duration = Duration::seconds(60);

pub(super) const JST: i32 = 9 * 3600;

// ---------------------------------------------------------------------------------------------
// Fixtures

/// The tests' base time: 2035-03-01T00:00:00.123Z.
pub(super) fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2035, 3, 1, 0, 0, 0).unwrap() + Duration::milliseconds(123)
}

pub(super) fn secs(n: i64) -> Duration {
    Duration::seconds(n)
}

pub(super) fn stale_before(now: DateTime<Utc>) -> DateTime<Utc> {
    now - GRACE
}

/// A call `scheduled` before it is `missed` (past grace), as the handlers pass it.
pub(super) fn missed_before(now: DateTime<Utc>) -> DateTime<Utc> {
    now - GRACE
}

pub(super) fn abandoned_before(now: DateTime<Utc>) -> DateTime<Utc> {
    now - CLAIM_TIMEOUT
}

pub(super) fn new_device_id() -> DeviceId {
    let raw = format!(
        "contract-{:016x}-{:08x}",
        fastrand::u64(..),
        fastrand::u32(..)
    );
    DeviceId::parse("deviceId", &raw).unwrap()
}

pub(super) fn new_token() -> VoipToken {
    let hex: String = (0..64)
        .map(|_| char::from_digit(fastrand::u32(0..16), 16).unwrap())
        .collect();
    VoipToken::parse("voipToken", &hex).unwrap()
}

pub(super) fn device(id: &DeviceId, environment: PushEnvironment, now: DateTime<Utc>) -> Device {
    Device {
        device_id: id.clone(),
        voip_token: new_token(),
        environment,
        updated_at: now,
        confirms_calls: false,
        alert_token: None,
    }
}

/// `now + lead`, written with the given UTC offset (seconds east) and milliseconds, parsed the way
/// the API parses a client's `scheduledAt`.
pub(super) fn scheduled_at(
    now: DateTime<Utc>,
    lead: Duration,
    offset_east_secs: i32,
) -> ScheduledAt {
    let offset = FixedOffset::east_opt(offset_east_secs).unwrap();
    let raw = (now + lead)
        .with_timezone(&offset)
        .to_rfc3339_opts(SecondsFormat::Millis, false);
    ScheduledAt::parse("scheduledAt", &raw, now).unwrap()
}

/// A new `scheduled` reservation made at `now`, `lead` ahead, in JST, with a caller name.
pub(super) fn reservation(id: &DeviceId, now: DateTime<Utc>, lead: Duration) -> Reservation {
    Reservation::new(
        id.clone(),
        scheduled_at(now, lead, JST),
        Some("Mika".into()),
        now,
    )
}

/// A new device's reservation made at [`t0`] for `t0 + LEAD`, its call id one that raises its
/// minute's count (by [`koe::domain::due::COUNT_STEP`]) or not, created; and its minute.
pub(super) async fn created_counting(store: &DynStore, counts: bool) -> (Reservation, String) {
    let mut r = reservation(&new_device_id(), t0(), LEAD);
    r.call_id = crate::count_estimate::call_id_that_counts(counts);
    let minute = r.scheduled_at.due_minute();
    create(store, &r, t0()).await;
    (r, minute)
}

pub(super) async fn create(store: &DynStore, r: &Reservation, now: DateTime<Utc>) {
    store
        .create_reservation(r, now, stale_before(now))
        .await
        .unwrap_or_else(|e| panic!("create_reservation {}: {e:?}", r.call_id.as_str()));
}

/// A create's answer: `r` made at `now`, by the dispatcher's own `stale_before`.
pub(super) async fn try_create(
    store: &DynStore,
    r: &Reservation,
    now: DateTime<Utc>,
) -> Result<Created, CreateError> {
    store.create_reservation(r, now, stale_before(now)).await
}

/// A cancel's answer (no device secret presented).
pub(super) async fn try_cancel(
    store: &DynStore,
    id: &DeviceId,
    now: DateTime<Utc>,
) -> Result<(), CancelError> {
    store
        .cancel_reservation(id, None, now, missed_before(now))
        .await
}

pub(super) async fn get(
    store: &DynStore,
    id: &DeviceId,
    now: DateTime<Utc>,
) -> Option<Reservation> {
    store
        .get_reservation(id, now)
        .await
        .expect("get_reservation")
}

pub(super) async fn get_some(store: &DynStore, id: &DeviceId, now: DateTime<Utc>) -> Reservation {
    get(store, id, now)
        .await
        .unwrap_or_else(|| panic!("a reservation for {id:?} at {now}"))
}

/// A new run's claim of `call` on `device` at `now`, a claim made before `abandoned_before`
/// counting as abandoned.
pub(super) async fn new_runs_claim(
    store: &DynStore,
    (device, call): (&DeviceId, &CallId),
    now: DateTime<Utc>,
    abandoned_before: DateTime<Utc>,
) -> bool {
    let run = RunToken::generate();
    let claim = store.claim_reservation(device, call, &run, now, abandoned_before);
    claim.await.expect("claim_reservation")
}

/// A claim by a run of its own (a new token each time).
pub(super) async fn claim(store: &DynStore, r: &Reservation, now: DateTime<Utc>) -> bool {
    claim_as(store, r, &RunToken::generate(), now).await
}

pub(super) async fn claim_as(
    store: &DynStore,
    r: &Reservation,
    run: &RunToken,
    now: DateTime<Utc>,
) -> bool {
    store
        .claim_for(r, run, now, abandoned_before(now))
        .await
        .expect("claim_reservation")
}

/// An outcome recorded by a run of its own (a new token each time).
pub(super) async fn finish(
    store: &DynStore,
    r: &Reservation,
    outcome: Outcome,
    now: DateTime<Utc>,
) -> bool {
    finish_as(store, r, outcome, &RunToken::generate(), now).await
}

pub(super) async fn finish_as(
    store: &DynStore,
    r: &Reservation,
    outcome: Outcome,
    run: &RunToken,
    now: DateTime<Utc>,
) -> bool {
    store
        .finish_for(r, outcome, run, now, abandoned_before(now))
        .await
        .expect("finish_reservation")
}

pub(super) async fn mark_as(
    store: &DynStore,
    r: &Reservation,
    run: &RunToken,
    now: DateTime<Utc>,
) -> bool {
    store
        .mark_push_started(&r.device_id, &r.call_id, run, now, false)
        .await
        .expect("mark_push_started")
}

pub(super) async fn release_as(
    store: &DynStore,
    r: &Reservation,
    run: &RunToken,
    now: DateTime<Utc>,
) -> bool {
    store
        .release_claim(&r.device_id, &r.call_id, run, now)
        .await
        .expect("release_claim")
}

/// A reservation driven into `status` along the dispatcher's path, for a fresh device: made at
/// [`t0`] for `t0 + LEAD`, claimed at its time, sent/failed a second later, or missed after the
/// grace period. Returns the record as stored and the time of its last transition.
pub(super) async fn seeded(
    store: &DynStore,
    status: ReservationStatus,
) -> (Reservation, DateTime<Utc>) {
    let id = new_device_id();
    let r = reservation(&id, t0(), LEAD);
    create(store, &r, t0()).await;
    let due = r.scheduled_at.utc();
    let last = match status {
        ReservationStatus::Scheduled => t0(),
        ReservationStatus::Claimed => {
            assert!(claim(store, &r, due).await, "seed: claim");
            due
        }
        ReservationStatus::Sent | ReservationStatus::Failed => {
            assert!(claim(store, &r, due).await, "seed: claim");
            let outcome = if status == ReservationStatus::Sent {
                Outcome::Sent
            } else {
                Outcome::Failed
            };
            assert!(
                finish(store, &r, outcome, due + secs(1)).await,
                "seed: finish"
            );
            due + secs(1)
        }
        ReservationStatus::Missed => {
            let late = due + GRACE + secs(1);
            assert!(finish(store, &r, Outcome::Missed, late).await, "seed: miss");
            late
        }
        ReservationStatus::Cancelled | ReservationStatus::Rang | ReservationStatus::Unconfirmed => {
            unreachable!("seeded along a device's path that does not confirm its calls")
        }
    };
    let stored = get_some(store, &id, last).await;
    assert_eq!(stored.status, status, "seeded status");
    (stored, last)
}

// ---------------------------------------------------------------------------------------------
// One instantiation per adapter

/// Instantiates the calling file's contract tests once per adapter, as `mod memory` and
/// `mod dynamodb` (DynamoDB Local, fresh tables from `template.yaml` per test), through
/// `on_each_store!`; the names after `threads 4:` on four worker threads.
macro_rules! contract_suite {
    ($($name:ident),* $(,)? $(; threads 4: $($threaded:ident),* $(,)?)?) => {
        on_each_store!(@adapters $($name),*; threads 4: $($($threaded),*)?);
    };
}

mod claim;
mod concurrency;
mod devices;
mod due;
mod finish;
mod idempotency;
mod notice;
mod reservations;
mod usage;
