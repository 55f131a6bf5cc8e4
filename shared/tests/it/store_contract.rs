//! The contract of the `Store` port (`koe::store::Store`), held against every adapter.
//!
//! Each contract test is one adapter-agnostic `async fn name(store: Arc<dyn Store>)` at the top
//! of this file; `contract_suite!` instantiates all of them once per adapter (`mod memory`,
//! `mod dynamodb`), so both adapters answer to exactly the same assertions.
//!
//! Conventions:
//! - Time is always explicit (`now` handed to the store, as the app's `Clock` does), starting at
//!   [`t0`] in 2035 so that TTLs set by the tests never lapse by the wall clock (DynamoDB itself
//!   must never delete a record a test still reads). Times carry milliseconds: adapters round-trip
//!   timestamps to the millisecond.
//! - Device ids are random, so tests never collide even on shared tables.
//! - `stale_before` = now − [`GRACE`], `abandoned_before` = now − [`CLAIM_TIMEOUT`], as the
//!   dispatcher computes them.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Duration, FixedOffset, SecondsFormat, TimeZone, Utc};
use koe::domain::device::{Device, DeviceId, PushEnvironment, VoipToken};
use koe::domain::due::{CALLS_PER_SHARD, DueCall, shards_for};
use koe::domain::reservation::{
    CallId, Reservation, ReservationStatus, RunToken, ScheduledAt, minute_bucket, terminal_expiry,
};
use koe::store::prelude::*;
use koe::store::{
    CancelError, CreateError, Created, IdempotentAnswer, Outcome, SpendOutcome, UsageOutcome,
};
use tokio::sync::Barrier;

pub(super) type DynStore = Arc<dyn Store>;

/// A scheduled reservation this far past its time can no longer be sent (app default 120 s).
pub(super) const GRACE: Duration = Duration::seconds(120);
/// A claim this old counts as abandoned (its run died).
pub(super) const CLAIM_TIMEOUT: Duration = Duration::seconds(30);
/// How far ahead the standard test reservation is made.
pub(super) const LEAD: Duration = Duration::seconds(60);

const JST: i32 = 9 * 3600;

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
    }
}

/// `now + lead`, written with the given UTC offset (seconds east) and milliseconds, parsed the way
/// the API parses a client's `scheduledAt`.
fn scheduled_at(now: DateTime<Utc>, lead: Duration, offset_east_secs: i32) -> ScheduledAt {
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
async fn try_cancel(
    store: &DynStore,
    id: &DeviceId,
    now: DateTime<Utc>,
) -> Result<(), CancelError> {
    store.cancel_reservation(id, None, now).await
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
async fn new_runs_claim(
    store: &DynStore,
    (device, call): (&DeviceId, &CallId),
    now: DateTime<Utc>,
    abandoned_before: DateTime<Utc>,
) -> bool {
    let run = RunToken::generate();
    let claim = store.claim_reservation(device, call, &run, now, abandoned_before);
    claim.await.expect("claim_reservation")
}

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
        .claim_reservation(&r.device_id, &r.call_id, run, now, abandoned_before(now))
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
        .finish_reservation(
            &r.device_id,
            &r.call_id,
            outcome,
            run,
            now,
            abandoned_before(now),
        )
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

fn counted(count: u32) -> UsageOutcome {
    UsageOutcome::Counted { count }
}

// ---------------------------------------------------------------------------------------------
// Devices

async fn put_device_then_get_returns_the_same_record(store: DynStore) {
    let id = new_device_id();
    let d = device(&id, PushEnvironment::Sandbox, t0());
    store.put_device(&d).await.expect("put_device");
    assert_eq!(
        store
            .get_device(&id, chrono::Utc::now())
            .await
            .expect("get_device"),
        Some(d)
    );

    let other = device(&new_device_id(), PushEnvironment::Production, t0());
    store.put_device(&other).await.expect("put_device");
    assert_eq!(
        store
            .get_device(&other.device_id, chrono::Utc::now())
            .await
            .expect("get_device"),
        Some(other)
    );
}

async fn put_device_again_replaces_token_and_environment(store: DynStore) {
    let id = new_device_id();
    let first = device(&id, PushEnvironment::Sandbox, t0());
    store.put_device(&first).await.expect("put_device");
    let second = device(&id, PushEnvironment::Production, t0() + secs(5));
    assert_ne!(first.voip_token, second.voip_token);
    store.put_device(&second).await.expect("put_device again");
    assert_eq!(
        store
            .get_device(&id, chrono::Utc::now())
            .await
            .expect("get_device"),
        Some(second)
    );
}

/// PUT /devices' write against the device's secret (docs/security.md, "Device-scoped access").
async fn device_proof_tells_the_secrets_state(store: DynStore) {
    use koe::store::DeviceProof::{Registered, Unregistered};
    let id = new_device_id();
    let proof = || {
        let store = store.clone();
        let id = id.clone();
        async move { store.device_proof(&id, chrono::Utc::now()).await.unwrap() }
    };
    assert_eq!(proof().await, Unregistered);
    let d = device(&id, PushEnvironment::Production, t0());
    store.put_device(&d).await.unwrap();
    let before_secrets = Registered {
        secret_hash: None,
        proven: false,
        has_token: true,
    };
    assert_eq!(proof().await, before_secrets);
    assert!(before_secrets.admits(None) && !before_secrets.admits(Some("h1")));
    store.register_device(&d, None, "h1").await.unwrap();
    let issued = Registered {
        secret_hash: Some("h1".into()),
        proven: false,
        has_token: true,
    };
    assert_eq!(proof().await, issued);
    assert!(issued.admits(None) && issued.admits(Some("h1")) && !issued.admits(Some("h2")));
    store.register_device(&d, Some("h1"), "h2").await.unwrap();
    let proven = Registered {
        secret_hash: Some("h1".into()),
        proven: true,
        has_token: true,
    };
    assert_eq!(proof().await, proven);
    assert!(proven.has_token());
    assert!(!proven.admits(None) && proven.admits(Some("h1")) && !proven.admits(Some("h2")));
    // APNs called the token dead: the token goes, the proven secret stays and is still needed.
    assert!(store.remove_device(&id, &d.voip_token).await.unwrap());
    let tokenless = proof().await;
    assert_eq!(
        tokenless,
        Registered {
            secret_hash: Some("h1".into()),
            proven: true,
            has_token: false,
        }
    );
    assert!(!tokenless.has_token());
    assert!(!tokenless.admits(None) && tokenless.admits(Some("h1")));
    assert_eq!(
        store.get_device(&id, chrono::Utc::now()).await.unwrap(),
        None,
        "nothing to push to"
    );
    // A device of before secrets loses its record with its token.
    let legacy = new_device_id();
    let old = device(&legacy, PushEnvironment::Production, t0());
    store.put_device(&old).await.unwrap();
    assert!(store.remove_device(&legacy, &old.voip_token).await.unwrap());
    assert_eq!(
        store
            .device_proof(&legacy, chrono::Utc::now())
            .await
            .unwrap(),
        Unregistered
    );
}

async fn register_device_holds_the_secret_once_it_is_proven(store: DynStore) {
    use koe::store::DeviceWrite::{Refused, Written};
    let id = new_device_id();
    let versions: Vec<Device> = (0..8)
        .map(|n| device(&id, PushEnvironment::Production, t0() + secs(n)))
        .collect();
    let v = |n: usize| versions[n].clone();
    let written = |issued, proven| Written { issued, proven };
    let register = |d: Device, presented: Option<&'static str>, new: &'static str| {
        let store = store.clone();
        async move { store.register_device(&d, presented, new).await.unwrap() }
    };
    // New: written with the new secret's hash, not yet proven.
    assert_eq!(register(v(0), None, "h1").await, written(true, false));
    // The app of before secrets: replaced without one, the unproven secret kept (not reissued).
    assert_eq!(register(v(1), None, "h2").await, written(false, false));
    // A wrong secret is refused and changes nothing.
    assert_eq!(register(v(2), Some("h2"), "h3").await, Refused);
    assert_eq!(
        store.get_device(&id, chrono::Utc::now()).await.unwrap(),
        Some(v(1))
    );
    // The right one: written, and proven from now on.
    assert_eq!(register(v(3), Some("h1"), "h4").await, written(false, true));
    assert_eq!(
        store.get_device(&id, chrono::Utc::now()).await.unwrap(),
        Some(v(3))
    );
    // Proven: without the secret, or with another, refused; with it, written.
    assert_eq!(register(v(4), None, "h5").await, Refused);
    assert_eq!(register(v(5), Some("h5"), "h6").await, Refused);
    assert_eq!(
        store.get_device(&id, chrono::Utc::now()).await.unwrap(),
        Some(v(3))
    );
    assert_eq!(register(v(6), Some("h1"), "h7").await, written(false, true));
    // The token removed (APNs called it dead): the proven secret still holds the device, so a
    // new token without it is refused (nobody else can take the device over), with it written.
    store.remove_device(&id, &v(6).voip_token).await.unwrap();
    assert_eq!(
        store.get_device(&id, chrono::Utc::now()).await.unwrap(),
        None
    );
    assert_eq!(register(v(7), None, "h8").await, Refused);
    assert_eq!(register(v(7), Some("h8"), "h9").await, Refused);
    assert_eq!(
        store.get_device(&id, chrono::Utc::now()).await.unwrap(),
        None
    );
    assert_eq!(register(v(7), Some("h1"), "h9").await, written(false, true));
    assert_eq!(
        store.get_device(&id, chrono::Utc::now()).await.unwrap(),
        Some(v(7))
    );
    // A record written without a secret (before secrets existed) gets one.
    let legacy = new_device_id();
    let old = device(&legacy, PushEnvironment::Sandbox, t0());
    store.put_device(&old).await.unwrap();
    let newer = device(&legacy, PushEnvironment::Sandbox, t0() + secs(1));
    assert_eq!(
        store.register_device(&newer, None, "g1").await.unwrap(),
        written(true, false)
    );
    assert_eq!(
        store
            .register_device(&newer, Some("g1"), "g2")
            .await
            .unwrap(),
        written(false, true)
    );
}

async fn get_unknown_device_is_none(store: DynStore) {
    assert_eq!(
        store
            .get_device(&new_device_id(), chrono::Utc::now())
            .await
            .expect("get_device"),
        None
    );
}

async fn remove_device_with_the_current_token_deletes_it(store: DynStore) {
    let id = new_device_id();
    let d = device(&id, PushEnvironment::Production, t0());
    store.put_device(&d).await.expect("put_device");
    assert!(
        store
            .remove_device(&id, &d.voip_token)
            .await
            .expect("remove_device"),
        "removed with the current token"
    );
    assert_eq!(
        store
            .get_device(&id, chrono::Utc::now())
            .await
            .expect("get_device"),
        None
    );
    assert!(
        !store
            .remove_device(&id, &d.voip_token)
            .await
            .expect("remove_device"),
        "nothing left to remove"
    );
}

async fn remove_device_with_a_stale_token_keeps_it(store: DynStore) {
    let id = new_device_id();
    let old = device(&id, PushEnvironment::Production, t0());
    store.put_device(&old).await.expect("put_device");
    let new = device(&id, PushEnvironment::Production, t0() + secs(1));
    store.put_device(&new).await.expect("put_device again");
    assert!(
        !store
            .remove_device(&id, &old.voip_token)
            .await
            .expect("remove_device"),
        "a stale token removes nothing"
    );
    assert_eq!(
        store
            .get_device(&id, chrono::Utc::now())
            .await
            .expect("get_device"),
        Some(new)
    );

    let unknown = new_device_id();
    assert!(
        !store
            .remove_device(&unknown, &new_token())
            .await
            .expect("remove_device"),
        "an unknown device removes nothing"
    );
    assert_eq!(
        store
            .get_device(&unknown, chrono::Utc::now())
            .await
            .expect("get_device"),
        None
    );
}

// ---------------------------------------------------------------------------------------------
// Reservations: create and get

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
/// as created in every state, counted once, and never written over (a claimed or sent call
/// stays as it is).
async fn the_same_reservation_made_again_is_created_once_and_counted_once(store: DynStore) {
    let id = new_device_id();
    let r = reservation(&id, t0(), LEAD);
    let minute = r.scheduled_at.due_minute();
    let before = store.due_count(&minute).await.unwrap();
    create(&store, &r, t0()).await;
    let later = t0() + secs(5);
    create(&store, &r, later).await;
    assert_eq!(store.due_count(&minute).await.unwrap(), before + 1);
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
    assert_eq!(store.due_count(&minute).await.unwrap(), before + 1);
}

async fn create_replaces_sent_failed_and_missed_records(store: DynStore) {
    for status in [
        ReservationStatus::Sent,
        ReservationStatus::Failed,
        ReservationStatus::Missed,
    ] {
        let (old, ended) = seeded(&store, status).await;
        let now = ended + secs(1);
        let new = reservation(&old.device_id, now, secs(600));
        assert_eq!(
            try_create(&store, &new, now).await,
            Ok(Created::New),
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
    assert_eq!(
        try_create(&store, &new, later).await,
        Ok(Created::New),
        "time < stale_before is stale"
    );
    assert_eq!(get(&store, &old.device_id, later).await, Some(new));

    // Claimed by a run that never finished, long past its time: also replaceable.
    let (old, _) = seeded(&store, ReservationStatus::Claimed).await;
    let now = old.scheduled_at.utc() + GRACE + secs(1);
    let new = reservation(&old.device_id, now, secs(600));
    assert_eq!(
        try_create(&store, &new, now).await,
        Ok(Created::New),
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
    assert_eq!(try_create(&store, &new, expiry).await, Ok(Created::New));
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
        store.cancel_reservation(&new_device_id(), None, t0()).await,
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
    for status in [
        ReservationStatus::Sent,
        ReservationStatus::Failed,
        ReservationStatus::Missed,
    ] {
        let (r, ended) = seeded(&store, status).await;
        let now = ended + secs(60);
        assert_eq!(
            try_cancel(&store, &r.device_id, now).await,
            Err(CancelError::TooLate(status))
        );
        assert_eq!(get(&store, &r.device_id, now).await, Some(r));
    }
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

// ---------------------------------------------------------------------------------------------
// Claim

async fn claim_with_a_wrong_call_id_or_device_is_refused(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let now = r.scheduled_at.utc();
    let wrong = CallId::generate();
    assert_ne!(wrong, r.call_id);
    assert!(
        !new_runs_claim(&store, (&r.device_id, &wrong), now, abandoned_before(now)).await,
        "wrong callId"
    );
    assert_eq!(get(&store, &r.device_id, now).await, Some(r.clone()));
    assert!(
        !new_runs_claim(
            &store,
            (&new_device_id(), &r.call_id),
            now,
            abandoned_before(now)
        )
        .await,
        "unknown device"
    );
}

async fn claim_scheduled_wins_and_records_claimed_at(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let now = r.scheduled_at.utc() - Duration::milliseconds(1500);
    let run = RunToken::generate();
    assert!(claim_as(&store, &r, &run, now).await);
    let stored = get_some(&store, &r.device_id, now).await;
    let expected = Reservation {
        status: ReservationStatus::Claimed,
        claimed_at: Some(now),
        claimed_by: Some(run),
        updated_at: now,
        ..r
    };
    assert_eq!(stored, expected);
}

/// A claim whose reply was lost, made again by its run: won again (the run's own), its time the
/// new attempt's; another run's claim of it is still refused.
async fn a_claim_made_again_by_its_own_run_is_won_again(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let first = r.scheduled_at.utc() - Duration::milliseconds(500);
    let run = RunToken::generate();
    assert!(claim_as(&store, &r, &run, first).await, "first attempt");
    let again = first + Duration::milliseconds(700);
    assert!(claim_as(&store, &r, &run, again).await, "made again: own");
    let stored = get_some(&store, &r.device_id, again).await;
    assert_eq!(
        (stored.status, stored.claimed_at, stored.claimed_by.as_ref()),
        (ReservationStatus::Claimed, Some(again), Some(&run))
    );
    assert!(!claim(&store, &r, again).await, "another run's claim");
    // Once marked, the run's own claim answers the same (its push has not left).
    assert!(mark_as(&store, &r, &run, again).await);
    assert!(claim_as(&store, &r, &run, again).await);
}

async fn a_second_claim_of_a_fresh_claim_is_refused(store: DynStore) {
    let (r, claimed_at) = seeded(&store, ReservationStatus::Claimed).await;
    let now = claimed_at + secs(5);
    assert!(!claim(&store, &r, now).await, "fresh claim held");
    // Boundary: a claim made exactly at `abandoned_before` is not abandoned.
    assert!(
        !new_runs_claim(&store, (&r.device_id, &r.call_id), now, claimed_at).await,
        "claimed_at == abandoned_before is not abandoned"
    );
    assert_eq!(get(&store, &r.device_id, now).await, Some(r));
}

async fn a_claim_made_before_abandoned_before_can_be_reclaimed(store: DynStore) {
    let (r, claimed_at) = seeded(&store, ReservationStatus::Claimed).await;
    let now = claimed_at + CLAIM_TIMEOUT + Duration::milliseconds(1);
    assert!(abandoned_before(now) > claimed_at);
    assert!(claim(&store, &r, now).await, "abandoned claim re-claimed");
    let stored = get_some(&store, &r.device_id, now).await;
    assert_eq!(stored.status, ReservationStatus::Claimed);
    assert_eq!(stored.claimed_at, Some(now), "the new claim's time");
    assert_eq!(stored.call_id, r.call_id);
    // The new claim is fresh again.
    let soon = now + secs(1);
    assert!(!claim(&store, &r, soon).await, "the re-claim is fresh");
}

async fn the_push_mark_is_the_claims_own_and_a_marked_claim_is_never_taken_over(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let run = RunToken::generate();
    let claimed_at = r.scheduled_at.utc() - Duration::milliseconds(500);
    assert!(claim_as(&store, &r, &run, claimed_at).await);
    let claimed = get_some(&store, &r.device_id, claimed_at).await;
    let now = claimed_at + Duration::milliseconds(300);
    assert!(
        !mark_as(&store, &r, &RunToken::generate(), now).await,
        "another run's mark"
    );
    assert!(
        !store
            .mark_push_started(&r.device_id, &CallId::generate(), &run, now, false)
            .await
            .expect("mark_push_started"),
        "another call's mark"
    );
    assert_eq!(get(&store, &r.device_id, now).await, Some(claimed.clone()));
    assert!(mark_as(&store, &r, &run, now).await, "the claim's own mark");
    let again = now + Duration::milliseconds(600);
    assert!(
        mark_as(&store, &r, &run, again).await,
        "marking again (its reply was lost) is the same mark"
    );
    let stored = get_some(&store, &r.device_id, again).await;
    assert_eq!(
        stored,
        Reservation {
            push_started_at: Some(now),
            ..claimed.clone()
        },
        "the first mark's time is kept"
    );

    // Abandoned after the mark: never re-claimed, never missed; a run records it failed.
    let later = claimed_at + GRACE + secs(1);
    assert!(abandoned_before(later) > claimed_at);
    assert!(
        !claim(&store, &r, later).await,
        "a marked claim is not re-claimed"
    );
    assert!(
        !finish(&store, &r, Outcome::Missed, later).await,
        "a marked claim is not missed"
    );
    assert!(finish(&store, &r, Outcome::Failed, later).await, "it fails");
    assert_eq!(
        get_some(&store, &r.device_id, later).await.status,
        ReservationStatus::Failed
    );
    assert!(
        !mark_as(&store, &r, &run, later).await,
        "a finished call has no claim to mark"
    );

    // A scheduled reservation has no claim to mark.
    let (scheduled, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let at = scheduled.scheduled_at.utc();
    assert!(!mark_as(&store, &scheduled, &run, at).await, "scheduled");
}

/// A run that could not resolve its push mark in time gives its claim back: `scheduled` again,
/// mark and claim gone, claimable at once by any run; made again (its reply lost) it answers
/// the same; a claim of another run, or a finished call, is not given back.
async fn a_claim_given_back_by_its_run_is_scheduled_again(store: DynStore) {
    let (r, _) = seeded(&store, ReservationStatus::Scheduled).await;
    let run = RunToken::generate();
    let claimed_at = r.scheduled_at.utc() - Duration::milliseconds(500);
    assert!(claim_as(&store, &r, &run, claimed_at).await);
    let now = claimed_at + secs(2);
    assert!(mark_as(&store, &r, &run, now).await);
    assert!(
        !release_as(&store, &r, &RunToken::generate(), now).await,
        "another run's release"
    );
    assert_eq!(
        get_some(&store, &r.device_id, now).await.status,
        ReservationStatus::Claimed
    );
    let later = now + secs(10);
    assert!(release_as(&store, &r, &run, later).await, "its own");
    let stored = get_some(&store, &r.device_id, later).await;
    assert_eq!(
        stored,
        Reservation {
            updated_at: later,
            ..r.clone()
        },
        "as it was before the claim"
    );
    assert!(
        release_as(&store, &r, &run, later).await,
        "made again: already released"
    );
    assert!(
        !mark_as(&store, &r, &run, later).await,
        "no claim to mark any more"
    );
    assert!(
        claim(&store, &r, later).await,
        "claimable by any run at once"
    );
    let sent = later + secs(1);
    assert!(finish(&store, &r, Outcome::Sent, sent).await);
    assert!(
        !release_as(&store, &r, &run, sent).await,
        "a finished call is not released"
    );
    assert_eq!(
        get_some(&store, &r.device_id, sent).await.status,
        ReservationStatus::Sent
    );
}

// ---------------------------------------------------------------------------------------------
// Finish

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

// ---------------------------------------------------------------------------------------------
// Due reservations (the time-bucket index)

async fn due_calls_list_scheduled_and_claimed_of_that_minute_in_time_order(store: DynStore) {
    // A random minute, so even shared tables hold nothing else in it.
    let minute = Utc.with_ymd_and_hms(2035, 1, 1, 0, 0, 0).unwrap()
        + Duration::minutes(fastrand::i64(0..500_000));
    let now = minute - Duration::minutes(5);
    let bucket = minute_bucket(minute);
    let make = |offset_ms: i64, offset_east: i32| {
        let id = new_device_id();
        let lead = Duration::minutes(5) + Duration::milliseconds(offset_ms);
        Reservation::new(
            id,
            scheduled_at(now, lead, offset_east),
            Some("Mika".into()),
            now,
        )
    };
    let a = make(40_000, JST);
    let b = make(5_250, 5 * 3600 + 1800);
    let b2 = make(5_100, 0);
    let c = make(20_000, -(3 * 3600 + 1800));
    let g = make(30_000, JST);
    let h = make(50_000, -8 * 3600);
    let k = make(45_000, JST);
    let e = make(-1, JST); // the minute before
    let f = make(60_000, JST); // the minute after
    assert_eq!(store.due_count(&bucket).await.unwrap(), 0);
    for r in [&a, &b, &b2, &c, &g, &h, &k, &e, &f] {
        create(&store, r, now).await;
    }
    assert_eq!(b.scheduled_at.due_minute(), bucket);
    assert_ne!(e.scheduled_at.due_minute(), bucket);
    assert_ne!(f.scheduled_at.due_minute(), bucket);
    assert_eq!(
        store.due_count(&bucket).await.unwrap(),
        7,
        "made for the minute"
    );

    assert_eq!(try_cancel(&store, &k.device_id, now).await, Ok(()));
    assert_eq!(
        store.due_count(&bucket).await.unwrap(),
        7,
        "a cancel does not count down"
    );
    assert!(claim(&store, &c, c.scheduled_at.utc()).await);
    assert!(claim(&store, &h, h.scheduled_at.utc()).await);

    let due =
        |rs: &[&Reservation]| -> Vec<DueCall> { rs.iter().map(|r| DueCall::from(*r)).collect() };
    let listed = store.due_calls(&bucket, 0).await.expect("due");
    assert_eq!(
        listed,
        due(&[&b2, &b, &c, &g, &a, &h]),
        "scheduled and claimed, in order, with what a push needs"
    );

    // Finished ones leave the bucket.
    let later = minute + secs(55);
    assert!(finish(&store, &g, Outcome::Missed, later + GRACE).await);
    assert!(finish(&store, &h, Outcome::Sent, h.scheduled_at.utc() + secs(1)).await);
    let listed = store.due_calls(&bucket, 0).await.expect("due");
    assert_eq!(listed, due(&[&b2, &b, &c, &a]), "terminal ones vanish");

    // The neighbouring minutes hold only their own; a shard past the count holds nothing.
    let before = minute_bucket(minute - secs(1));
    assert_eq!(store.due_calls(&before, 0).await.unwrap(), due(&[&e]));
    let after = minute_bucket(minute + secs(60));
    assert_eq!(store.due_calls(&after, 0).await.unwrap(), due(&[&f]));
    let empty = minute_bucket(minute + Duration::minutes(2));
    assert_eq!(store.due_calls(&empty, 0).await.unwrap(), vec![]);
    assert_eq!(store.due_count(&empty).await.unwrap(), 0);
    assert_eq!(store.due_calls(&bucket, 1).await.unwrap(), vec![]);
}

async fn a_busy_minute_spreads_over_shards_that_together_list_each_call_once(store: DynStore) {
    let minute = Utc.with_ymd_and_hms(2035, 1, 1, 0, 0, 0).unwrap()
        + Duration::minutes(fastrand::i64(0..500_000));
    let now = minute - Duration::minutes(5);
    let bucket = minute_bucket(minute);
    let made = 2 * CALLS_PER_SHARD as usize + 28;
    let mut all = std::collections::BTreeSet::new();
    let creates = (0..made).map(|i| {
        let store = store.clone();
        let lead = Duration::minutes(5) + Duration::milliseconds((i * 97 % 60_000) as i64);
        let r = Reservation::new(new_device_id(), scheduled_at(now, lead, JST), None, now);
        all.insert(r.call_id.as_str().to_owned());
        async move { create(&store, &r, now).await }
    });
    // In batches, as many apps would; of 16, so that the last 28 creates (the count read at
    // 64 or more) spread over three shards (none in the third: (2/3)^28, about 1 in 85,000).
    let creates: Vec<_> = creates.collect();
    let mut creates = creates.into_iter();
    loop {
        let batch: Vec<_> = creates.by_ref().take(16).collect();
        if batch.is_empty() {
            break;
        }
        futures_util::future::join_all(batch).await;
    }
    let count = store.due_count(&bucket).await.unwrap();
    assert!(count as usize >= made, "{count}");
    let shards = shards_for(count);
    assert_eq!(shards, 3, "{made} made, {CALLS_PER_SHARD} a shard");
    let mut listed = Vec::new();
    for shard in 0..shards {
        let calls = store.due_calls(&bucket, shard).await.unwrap();
        assert!(!calls.is_empty(), "shard {shard} holds some");
        assert!(
            calls.is_sorted_by_key(|c| c.scheduled_at.utc()),
            "in time order"
        );
        listed.extend(calls.into_iter().map(|c| c.call_id.as_str().to_owned()));
    }
    assert_eq!(listed.len(), made, "each call once");
    assert_eq!(
        listed
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>(),
        all
    );
}

// ---------------------------------------------------------------------------------------------
// Concurrency

async fn cancel_and_claim_race_has_exactly_one_winner(store: DynStore, trials: usize) {
    let (mut cancel_won, mut claim_won) = (0usize, 0usize);
    for trial in 0..trials {
        let id = new_device_id();
        let r = reservation(&id, t0(), LEAD);
        create(&store, &r, t0()).await;
        let now = r.scheduled_at.utc();
        let barrier = Arc::new(Barrier::new(2));
        let cancel_task = {
            let (store, id, barrier) = (store.clone(), id.clone(), barrier.clone());
            async move {
                barrier.wait().await;
                try_cancel(&store, &id, now).await
            }
        };
        let claim_task = {
            let (store, r, barrier) = (store.clone(), r.clone(), barrier.clone());
            async move {
                barrier.wait().await;
                new_runs_claim(
                    &store,
                    (&r.device_id, &r.call_id),
                    now,
                    abandoned_before(now),
                )
                .await
            }
        };
        // Alternate which one is spawned first, so both get a head start now and then.
        let (cancel, claim) = if trial % 2 == 0 {
            let cancel = tokio::spawn(cancel_task);
            (cancel, tokio::spawn(claim_task))
        } else {
            let claim = tokio::spawn(claim_task);
            (tokio::spawn(cancel_task), claim)
        };
        let cancel = cancel.await.expect("cancel task");
        let claimed = claim.await.expect("claim task");
        let after = get(&store, &id, now).await;
        match (&cancel, claimed) {
            (Ok(()), false) => {
                assert_eq!(
                    after, None,
                    "trial {trial}: cancel won, record must be gone"
                );
                cancel_won += 1;
            }
            (Err(CancelError::TooLate(ReservationStatus::Claimed)), true) => {
                let after = after.unwrap_or_else(|| panic!("trial {trial}: claim won, no record"));
                assert_eq!(after.status, ReservationStatus::Claimed, "trial {trial}");
                assert_eq!(after.call_id, r.call_id, "trial {trial}");
                assert_eq!(after.claimed_at, Some(now), "trial {trial}");
                claim_won += 1;
            }
            _ => panic!(
                "trial {trial}: not exactly one winner: cancel {cancel:?}, claim {claimed}, record {after:?}"
            ),
        }
    }
    println!(
        "cancel vs claim over {trials} trials: cancel won {cancel_won}, claim won {claim_won}"
    );
    assert_eq!(cancel_won + claim_won, trials);
}

async fn concurrent_creates_for_one_device_have_one_winner(store: DynStore) {
    const CALLERS: usize = 20;
    let id = new_device_id();
    let now = t0();
    let candidates: Vec<Reservation> = (0..CALLERS)
        .map(|i| reservation(&id, now, LEAD + secs(i as i64)))
        .collect();
    let distinct: HashSet<&CallId> = candidates.iter().map(|r| &r.call_id).collect();
    assert_eq!(distinct.len(), CALLERS, "distinct callIds");

    let barrier = Arc::new(Barrier::new(CALLERS));
    let tasks: Vec<_> = candidates
        .iter()
        .cloned()
        .map(|r| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let result = try_create(&store, &r, now).await;
                (r, result)
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut exists = 0;
    for task in tasks {
        match task.await.expect("create task") {
            (r, Ok(Created::New)) => winners.push(r),
            (_, Err(CreateError::Exists)) => exists += 1,
            (r, other) => panic!("create {}: {other:?}", r.call_id.as_str()),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one create wins");
    assert_eq!(exists, CALLERS - 1, "the others get Exists");
    let winner = winners.pop().unwrap();
    assert_eq!(
        get(&store, &id, now).await,
        Some(winner),
        "the winner is stored"
    );
}

// ---------------------------------------------------------------------------------------------
// Agent usage counter

const DAY: &str = "2035-03-01";
const NEXT_DAY: &str = "2035-03-02";

fn usage_expiry(day_end: DateTime<Utc>) -> i64 {
    (day_end + Duration::days(7)).timestamp()
}

async fn count(store: &DynStore, id: &DeviceId, day: &str, limit: u32) -> UsageOutcome {
    store
        .count_agent_use(id, day, limit, usage_expiry(t0()))
        .await
        .expect("count_agent_use")
}

async fn usage_counts_up_to_the_limit_then_refuses_without_counting(store: DynStore) {
    let id = new_device_id();
    for n in 1..=3 {
        assert_eq!(count(&store, &id, DAY, 3).await, counted(n));
    }
    assert_eq!(count(&store, &id, DAY, 3).await, UsageOutcome::LimitReached);
    assert_eq!(count(&store, &id, DAY, 3).await, UsageOutcome::LimitReached);
    // Refusals counted nothing: with a higher limit the count goes on from 3.
    assert_eq!(count(&store, &id, DAY, 4).await, counted(4));
    assert_eq!(count(&store, &id, DAY, 4).await, UsageOutcome::LimitReached);
}

async fn usage_is_counted_per_day_and_per_device(store: DynStore) {
    let (a, b) = (new_device_id(), new_device_id());
    assert_eq!(count(&store, &a, DAY, 2).await, counted(1));
    assert_eq!(count(&store, &a, DAY, 2).await, counted(2));
    assert_eq!(count(&store, &a, DAY, 2).await, UsageOutcome::LimitReached);
    assert_eq!(
        count(&store, &a, NEXT_DAY, 2).await,
        counted(1),
        "a new day"
    );
    assert_eq!(
        count(&store, &b, DAY, 2).await,
        counted(1),
        "another device"
    );
    assert_eq!(count(&store, &b, DAY, 2).await, counted(2));
    assert_eq!(count(&store, &a, NEXT_DAY, 2).await, counted(2));
    assert_eq!(count(&store, &a, DAY, 2).await, UsageOutcome::LimitReached);
}

/// `callers` concurrent counts for one fresh device on [`DAY`]; the device and the outcomes.
async fn concurrent_usage(
    store: &DynStore,
    callers: usize,
    limit: u32,
) -> (DeviceId, Vec<UsageOutcome>) {
    let id = new_device_id();
    let barrier = Arc::new(Barrier::new(callers));
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (store, id, barrier) = (store.clone(), id.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                count(&store, &id, DAY, limit).await
            })
        })
        .collect();
    let mut outcomes = Vec::with_capacity(callers);
    for task in tasks {
        outcomes.push(task.await.expect("count task"));
    }
    (id, outcomes)
}

/// The sorted counts of the counted calls, and how many were refused.
fn split(outcomes: &[UsageOutcome]) -> (Vec<u32>, usize) {
    let mut counts: Vec<u32> = outcomes
        .iter()
        .filter_map(|o| match o {
            UsageOutcome::Counted { count } => Some(*count),
            UsageOutcome::LimitReached => None,
        })
        .collect();
    counts.sort_unstable();
    let refused = outcomes.len() - counts.len();
    (counts, refused)
}

async fn concurrent_usage_never_exceeds_the_limit(store: DynStore) {
    let (id, outcomes) = concurrent_usage(&store, 60, 50).await;
    let (counts, refused) = split(&outcomes);
    assert_eq!(counts, (1..=50).collect::<Vec<u32>>(), "50 distinct counts");
    assert_eq!(refused, 10, "10 refused");
    // The stored count is exactly 50: the refusals counted nothing.
    assert_eq!(
        count(&store, &id, DAY, 50).await,
        UsageOutcome::LimitReached
    );
    assert_eq!(count(&store, &id, DAY, 51).await, counted(51));
}

async fn concurrent_usage_at_exactly_the_limit_counts_everyone(store: DynStore) {
    let (id, outcomes) = concurrent_usage(&store, 50, 50).await;
    let (counts, refused) = split(&outcomes);
    assert_eq!(counts, (1..=50).collect::<Vec<u32>>(), "all 50 counted");
    assert_eq!(refused, 0, "none refused");
    assert_eq!(
        count(&store, &id, DAY, 50).await,
        UsageOutcome::LimitReached
    );
}

/// A fresh plan id, as `agent::binding` makes them (14 base64url characters).
fn new_plan_id() -> String {
    format!("p{:013x}", fastrand::u64(..) >> 12)
}

async fn plan_answers_count_up_to_the_bound_per_plan(store: DynStore) {
    let (a, b) = (new_plan_id(), new_plan_id());
    let expire_at = usage_expiry(t0());
    for n in 1..=3 {
        assert_eq!(
            store.count_plan_answer(&a, 3, expire_at).await.unwrap(),
            counted(n)
        );
    }
    for _ in 0..2 {
        assert_eq!(
            store.count_plan_answer(&a, 3, expire_at).await.unwrap(),
            UsageOutcome::LimitReached
        );
    }
    assert_eq!(
        store.count_plan_answer(&b, 3, expire_at).await.unwrap(),
        counted(1),
        "another plan"
    );
    // A plan counter never touches a device's day counter (they share the DynamoDB table).
    let device = new_device_id();
    assert_eq!(count(&store, &device, "answers", 3).await, counted(1));
}

async fn concurrent_plan_answers_never_exceed_the_bound(store: DynStore) {
    let plan = new_plan_id();
    let barrier = Arc::new(Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (store, plan, barrier) = (store.clone(), plan.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .count_plan_answer(&plan, 3, usage_expiry(t0()))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    let (counts, refused) = split(&outcomes);
    assert_eq!(counts, vec![1, 2, 3]);
    assert_eq!(refused, 17);
}

fn spend_api() -> String {
    // A fresh counter per test run (the DynamoDB tables are fresh, the memory store too; this
    // also keeps the two tests below apart).
    format!("test{:08x}", fastrand::u32(..))
}

async fn reserve(store: &DynStore, api: &str, tokens: u64, ceiling: u64) -> SpendOutcome {
    store
        .reserve_tokens(api, DAY, tokens, ceiling, usage_expiry(t0()))
        .await
        .expect("reserve_tokens")
}

async fn tokens_reserve_below_the_ceiling_settle_both_ways_and_notice_once(store: DynStore) {
    let api = spend_api();
    assert_eq!(
        reserve(&store, &api, 400, 1000).await,
        SpendOutcome::Reserved { total: 400 }
    );
    assert_eq!(
        reserve(&store, &api, 400, 1000).await,
        SpendOutcome::Reserved { total: 800 }
    );
    // Below the ceiling, the reservation may pass it (the bound is one call).
    assert_eq!(
        reserve(&store, &api, 400, 1000).await,
        SpendOutcome::Reserved { total: 1200 }
    );
    assert_eq!(
        reserve(&store, &api, 1, 1000).await,
        SpendOutcome::CeilingReached
    );
    // Corrected down to the usage: below the ceiling again.
    store
        .settle_tokens(&api, DAY, -343 * 3, usage_expiry(t0()))
        .await
        .unwrap();
    assert_eq!(
        reserve(&store, &api, 0, 1000).await,
        SpendOutcome::Reserved { total: 171 }
    );
    store
        .settle_tokens(&api, DAY, 829, usage_expiry(t0()))
        .await
        .unwrap();
    assert_eq!(
        reserve(&store, &api, 0, 1000).await,
        SpendOutcome::CeilingReached
    );
    // Another day and another API count apart.
    assert_eq!(
        store
            .reserve_tokens(&api, NEXT_DAY, 5, 1000, usage_expiry(t0()))
            .await
            .unwrap(),
        SpendOutcome::Reserved { total: 5 }
    );
    assert_eq!(
        reserve(&store, &spend_api(), 5, 1000).await,
        SpendOutcome::Reserved { total: 5 }
    );
    // One notice per API and day.
    let notice = |day: &'static str| {
        let (store, api) = (store.clone(), api.clone());
        async move {
            store
                .claim_ceiling_notice(&api, day, usage_expiry(t0()))
                .await
                .unwrap()
        }
    };
    assert!(notice(DAY).await);
    assert!(!notice(DAY).await);
    assert!(notice(NEXT_DAY).await);
}

async fn concurrent_reservations_stop_exactly_at_the_ceiling_and_one_notice_wins(store: DynStore) {
    let api = spend_api();
    let barrier = Arc::new(Barrier::new(30));
    let tasks: Vec<_> = (0..30)
        .map(|_| {
            let (store, api, barrier) = (store.clone(), api.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let outcome = store
                    .reserve_tokens(&api, DAY, 100, 1000, usage_expiry(t0()))
                    .await
                    .unwrap();
                let noticed = match outcome {
                    SpendOutcome::CeilingReached => store
                        .claim_ceiling_notice(&api, DAY, usage_expiry(t0()))
                        .await
                        .unwrap(),
                    SpendOutcome::Reserved { .. } => false,
                };
                (outcome, noticed)
            })
        })
        .collect();
    let mut totals = Vec::new();
    let mut notices = 0;
    for task in tasks {
        let (outcome, noticed) = task.await.unwrap();
        if let SpendOutcome::Reserved { total } = outcome {
            totals.push(total);
        }
        notices += usize::from(noticed);
    }
    totals.sort_unstable();
    assert_eq!(totals, (1..=10).map(|n| n * 100).collect::<Vec<u64>>());
    assert_eq!(notices, 1);
    assert_eq!(
        reserve(&store, &api, 0, 1001).await,
        SpendOutcome::Reserved { total: 1000 }
    );
}

fn idempotent_answer(key: &str, body: &str, expire_at: DateTime<Utc>) -> IdempotentAnswer {
    IdempotentAnswer {
        key: key.to_owned(),
        request_hash: format!("hash-of-{body}"),
        status: 201,
        body: body.to_owned(),
        expire_at: expire_at.timestamp(),
    }
}

async fn idempotent_answers_are_kept_first_wins_until_they_expire(store: DynStore) {
    let key = format!("calls#{:016x}", fastrand::u64(..));
    let now = t0();
    let day = now + Duration::hours(24);
    assert_eq!(store.idempotent_answer(&key, now).await.unwrap(), None);

    let first = idempotent_answer(&key, r#"{"callId":"a","callerName":"こえ"}"#, day);
    assert!(store.keep_idempotent_answer(&first, now).await.unwrap());
    assert_eq!(
        store.idempotent_answer(&key, now).await.unwrap(),
        Some(first.clone())
    );
    // The first one wins while it lives.
    let second = idempotent_answer(&key, r#"{"callId":"b"}"#, day + Duration::hours(1));
    assert!(!store.keep_idempotent_answer(&second, now).await.unwrap());
    assert_eq!(
        store
            .idempotent_answer(&key, day - Duration::seconds(1))
            .await
            .unwrap(),
        Some(first)
    );
    // Expired (even before TTL deletes it): absent, and a new answer can be kept.
    assert_eq!(store.idempotent_answer(&key, day).await.unwrap(), None);
    assert!(store.keep_idempotent_answer(&second, day).await.unwrap());
    assert_eq!(
        store.idempotent_answer(&key, day).await.unwrap(),
        Some(second)
    );
    // Another key is another record; no device's reservation is touched.
    let other = format!("calls#{:016x}", fastrand::u64(..));
    assert_eq!(store.idempotent_answer(&other, now).await.unwrap(), None);
}

// ---------------------------------------------------------------------------------------------
// One instantiation per adapter

macro_rules! contract_suite {
    (store: $store:expr, race_trials: $trials:expr $(,)?) => {
        on_each_store!(@store $store;
            put_device_then_get_returns_the_same_record,
            put_device_again_replaces_token_and_environment,
            register_device_holds_the_secret_once_it_is_proven,
            device_proof_tells_the_secrets_state,
            get_unknown_device_is_none,
            remove_device_with_the_current_token_deletes_it,
            remove_device_with_a_stale_token_keeps_it,
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
            cancel_expired_is_not_found,
            claim_with_a_wrong_call_id_or_device_is_refused,
            claim_scheduled_wins_and_records_claimed_at,
            a_second_claim_of_a_fresh_claim_is_refused,
            a_claim_made_before_abandoned_before_can_be_reclaimed,
            a_claim_made_again_by_its_own_run_is_won_again,
            the_push_mark_is_the_claims_own_and_a_marked_claim_is_never_taken_over,
            a_claim_given_back_by_its_run_is_scheduled_again,
            finish_sent_or_failed_from_claimed_sets_status_and_expiry,
            finish_sent_or_failed_from_scheduled_is_refused,
            finish_with_a_wrong_call_id_is_refused,
            finish_missed_from_scheduled_sets_status_and_expiry,
            finish_missed_from_a_fresh_claim_is_refused_but_not_from_an_abandoned_one,
            finishing_twice_is_refused_the_second_time,
            due_calls_list_scheduled_and_claimed_of_that_minute_in_time_order,
            a_busy_minute_spreads_over_shards_that_together_list_each_call_once,
            usage_counts_up_to_the_limit_then_refuses_without_counting,
            usage_is_counted_per_day_and_per_device,
            plan_answers_count_up_to_the_bound_per_plan,
            idempotent_answers_are_kept_first_wins_until_they_expire,
            tokens_reserve_below_the_ceiling_settle_both_ways_and_notice_once;
            threads 4:
            concurrent_creates_for_one_device_have_one_winner,
            concurrent_usage_never_exceeds_the_limit,
            concurrent_usage_at_exactly_the_limit_counts_everyone,
            concurrent_plan_answers_never_exceed_the_bound,
            concurrent_reservations_stop_exactly_at_the_ceiling_and_one_notice_wins
        );

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn cancel_and_claim_race_has_exactly_one_winner() {
            super::cancel_and_claim_race_has_exactly_one_winner(store().await, $trials).await;
        }
    };
}

mod memory {
    contract_suite!(
        store: koe::store::memory::MemoryStore::new(),
        race_trials: 100,
    );
}

/// DynamoDB Local (testkit's, started once per test process), fresh tables from `template.yaml` per test.
mod dynamodb {
    contract_suite!(
        store: koe_testkit::dynamodb::fresh_store().await,
        race_trials: 30,
    );
}
