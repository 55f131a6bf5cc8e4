//! A store layer: one hook ([`StoreLayer::around`]) that every request of the five ports passes.
//!
//! A layer in front of an inner store (the test kit's held replies, its DynamoDB limits, its
//! failing store) implements [`StoreLayer`] and is a [`Store`] by that alone: each method of
//! the ports becomes an [`Op`] naming the request and its arguments, and the hook decides what
//! happens around the inner store's answer (hold it, retry it, charge it, refuse it). What a
//! layer does not change it hands on with `call().await`.

use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{
    BatchFence, BatchWrite, CancelError, CancelRequest, ClaimAnswer, ClaimCall, ClaimMark,
    ConfirmAnswer, ConfirmRequest, CreateError, CreateRequest, Created, DeviceProof, DeviceWrite,
    IdempotentAnswer, Outcome, ProveRequest, RegisterRequest, RunCall, RunWrite, Store, StoreError,
    UsageRequest, WakeClaim,
};
use crate::domain::device::{AlertToken, Device, DeviceId, VoipToken};
use crate::domain::due::DueCall;
use crate::domain::reservation::{CallId, Reservation, RunToken};
use crate::store::prelude::*;

type Time = DateTime<Utc>;

/// The inner store's answer to one request, made when called (and made again when called again,
/// as a retry makes it).
pub type Call<'a, T, E> =
    &'a (dyn Fn() -> Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'a>> + Send + Sync);

/// What a layer does around each request of the store's ports on its way to [`StoreLayer::inner`].
#[async_trait]
pub trait StoreLayer: Send + Sync {
    /// The store behind the layer.
    type Inner: Store + ?Sized;

    fn inner(&self) -> &Self::Inner;

    /// Answers `op`: with `call()`, the inner store's answer, or without it.
    async fn around<T, E>(&self, op: Op<'_>, call: Call<'_, T, E>) -> Result<T, E>
    where
        T: Send,
        E: From<StoreError> + Send;
}

/// One request of the store's ports: a variant per method, named after it, with the method's
/// arguments in its order.
#[derive(Clone, Copy)]
pub enum Op<'a> {
    PutDevice(&'a Device),
    RegisterDevice(&'a Device, Option<&'a str>, &'a str),
    GetDevice(&'a DeviceId, Time),
    DeviceProof(&'a DeviceId, Time),
    ProveDevice(&'a DeviceId, &'a str, Time),
    RemoveDevice(&'a DeviceId, &'a VoipToken),
    RemoveAlertToken(&'a DeviceId, &'a AlertToken),
    CreateReservation(&'a Reservation, Time, Time),
    WasCancelled(&'a CallId, Time),
    GetReservation(&'a DeviceId, Time),
    CancelReservation(&'a DeviceId, Option<&'a CallId>, Time, Time),
    ConfirmCall(&'a DeviceId, &'a CallId, Time),
    DueCount(&'a str),
    DueCalls(&'a str, u32),
    WatchMinute(&'a str, Time),
    SweptBefore(),
    RaiseSweptBefore(Time),
    ClaimWake(&'a str, Time, Time, &'a str),
    ClaimDue(
        &'a DeviceId,
        &'a CallId,
        &'a RunToken,
        Time,
        Time,
        ClaimMark,
    ),
    MarkPushStarted(&'a DeviceId, &'a CallId, &'a RunToken, Time, bool),
    ReleaseClaim(&'a DeviceId, &'a CallId, &'a RunToken, Time),
    FinishReservation(&'a DeviceId, &'a CallId, Outcome, &'a RunToken, Time, Time),
    ClaimNotice(&'a DeviceId, &'a CallId, &'a RunToken, Time),
    NoticeSent(&'a DeviceId, &'a CallId, &'a RunToken, Time),
    ReleaseNotice(&'a DeviceId, &'a CallId, &'a RunToken, Time, Time),
    MarkBatch(&'a RunToken, Time, Time),
    FenceBatch(&'a RunToken, Time, Time),
    SettleBatch(
        &'a DeviceId,
        &'a CallId,
        &'a RunToken,
        Time,
        Time,
        Option<Time>,
    ),
    CountAgentUse(&'a DeviceId, &'a str, u32, i64),
    CountPlanAnswer(&'a str, u32, i64),
    ReserveTokens(&'a str, &'a str, u64, u64, i64),
    SettleTokens(&'a str, &'a str, i64, i64),
    ReadTokens(&'a str, &'a str),
    ClaimCeilingNotice(&'a str, &'a str, i64),
    ReadCeilingNotice(&'a str, &'a str),
    IdempotentAnswer(&'a str, Time),
    KeepIdempotentAnswer(&'a IdempotentAnswer, Time),
}

/// The DynamoDB request an [`Op`] stands for: the one the DynamoDB adapter makes its change (or
/// its read) with (a few make a read or a count before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    GetItem,
    PutItem,
    UpdateItem,
    /// Writes of several items at once, all or none (the cancel and its tombstone): 2 WCU per
    /// item and KB.
    TransactWriteItems,
    Query,
}

impl Request {
    pub fn as_str(self) -> &'static str {
        match self {
            Request::GetItem => "GetItem",
            Request::PutItem => "PutItem",
            Request::UpdateItem => "UpdateItem",
            Request::TransactWriteItems => "TransactWriteItems",
            Request::Query => "Query",
        }
    }
}

impl<'a> Op<'a> {
    /// [`DeviceStore::register_device`]'s.
    pub fn register(r: RegisterRequest<'a>) -> Self {
        Op::RegisterDevice(r.device, r.presented, r.new_secret_hash)
    }

    /// [`DeviceStore::prove_device`]'s.
    pub fn prove(p: ProveRequest<'a>) -> Self {
        Op::ProveDevice(p.id, p.secret_hash, p.now)
    }

    /// [`ReservationStore::create_reservation`]'s.
    pub fn create(c: CreateRequest<'a>) -> Self {
        Op::CreateReservation(c.reservation, c.now, c.stale_before)
    }

    /// [`ReservationStore::cancel_reservation`]'s.
    pub fn cancel(c: CancelRequest<'a>) -> Self {
        Op::CancelReservation(c.id, c.call_id, c.now, c.missed_before)
    }

    /// [`ReservationStore::confirm_call`]'s.
    pub fn confirm(c: ConfirmRequest<'a>) -> Self {
        Op::ConfirmCall(c.id, c.call_id, c.now)
    }

    /// [`DispatchStore::mark_batch`]'s or [`DispatchStore::fence_batch`]'s, by what it offers.
    pub fn batch_write(w: BatchWrite<'a>) -> Self {
        match w.offer {
            BatchFence::Marked(_) => Op::MarkBatch(w.run, w.batch, w.now),
            BatchFence::Fenced => Op::FenceBatch(w.run, w.batch, w.now),
        }
    }

    /// [`DispatchStore::claim_wake`]'s.
    pub fn wake_claim(w: WakeClaim<'a>) -> Self {
        Op::ClaimWake(w.minute, w.due_at, w.until, w.claimant)
    }

    /// [`DispatchStore::claim_due`]'s.
    pub fn claim_call(claim: ClaimCall<'a>) -> Self {
        let c = claim.call;
        Op::ClaimDue(
            c.id,
            c.call_id,
            c.run,
            c.now,
            claim.abandoned_before,
            claim.mark,
        )
    }

    /// The port method's of a run's write: [`Op::MarkPushStarted`], [`Op::ReleaseClaim`], ...
    pub fn run_write(c: RunCall<'a>, write: RunWrite) -> Self {
        match write {
            RunWrite::MarkPushStarted { confirms } => {
                Op::MarkPushStarted(c.id, c.call_id, c.run, c.now, confirms)
            }
            RunWrite::Release => Op::ReleaseClaim(c.id, c.call_id, c.run, c.now),
            RunWrite::Finish {
                outcome,
                abandoned_before,
            } => Op::FinishReservation(c.id, c.call_id, outcome, c.run, c.now, abandoned_before),
            RunWrite::ClaimNotice => Op::ClaimNotice(c.id, c.call_id, c.run, c.now),
            RunWrite::NoticeSent => Op::NoticeSent(c.id, c.call_id, c.run, c.now),
            RunWrite::ReleaseNotice { retry_at } => {
                Op::ReleaseNotice(c.id, c.call_id, c.run, c.now, retry_at)
            }
            RunWrite::SettleBatch { batch, marked_at } => {
                Op::SettleBatch(c.id, c.call_id, c.run, c.now, batch, marked_at)
            }
        }
    }

    /// The [`UsageStore`] method's.
    pub fn usage(request: UsageRequest<'a>) -> Self {
        use UsageRequest::*;
        match request {
            AgentUse(id, day, limit, expire_at) => Op::CountAgentUse(id, day, limit, expire_at),
            PlanAnswer(plan_id, limit, expire_at) => Op::CountPlanAnswer(plan_id, limit, expire_at),
            ReserveTokens(api, day, tokens, ceiling, expire_at) => {
                Op::ReserveTokens(api, day, tokens, ceiling, expire_at)
            }
            SettleTokens(api, day, delta, expire_at) => {
                Op::SettleTokens(api, day, delta, expire_at)
            }
            ReadTokens(api, day) => Op::ReadTokens(api, day),
            CeilingNotice(api, day, expire_at) => Op::ClaimCeilingNotice(api, day, expire_at),
            ReadNotice(api, day) => Op::ReadCeilingNotice(api, day),
        }
    }

    /// The port method's name, as the variant is named (`CreateReservation`, ...).
    pub fn name(&self) -> &'static str {
        use Op::*;
        match self {
            PutDevice(..) => "PutDevice",
            RegisterDevice(..) => "RegisterDevice",
            GetDevice(..) => "GetDevice",
            DeviceProof(..) => "DeviceProof",
            ProveDevice(..) => "ProveDevice",
            RemoveDevice(..) => "RemoveDevice",
            RemoveAlertToken(..) => "RemoveAlertToken",
            CreateReservation(..) => "CreateReservation",
            WasCancelled(..) => "WasCancelled",
            GetReservation(..) => "GetReservation",
            CancelReservation(..) => "CancelReservation",
            ConfirmCall(..) => "ConfirmCall",
            DueCount(..) => "DueCount",
            DueCalls(..) => "DueCalls",
            WatchMinute(..) => "WatchMinute",
            ClaimWake(..) => "ClaimWake",
            ClaimDue(..) => "ClaimDue",
            MarkPushStarted(..) => "MarkPushStarted",
            ReleaseClaim(..) => "ReleaseClaim",
            FinishReservation(..) => "FinishReservation",
            ClaimNotice(..) => "ClaimNotice",
            NoticeSent(..) => "NoticeSent",
            ReleaseNotice(..) => "ReleaseNotice",
            MarkBatch(..) => "MarkBatch",
            FenceBatch(..) => "FenceBatch",
            SettleBatch(..) => "SettleBatch",
            CountAgentUse(..) => "CountAgentUse",
            CountPlanAnswer(..) => "CountPlanAnswer",
            ReserveTokens(..) => "ReserveTokens",
            SettleTokens(..) => "SettleTokens",
            ReadTokens(..) => "ReadTokens",
            ReadCeilingNotice(..) => "ReadCeilingNotice",
            ClaimCeilingNotice(..) => "ClaimCeilingNotice",
            IdempotentAnswer(..) => "IdempotentAnswer",
            KeepIdempotentAnswer(..) => "KeepIdempotentAnswer",
            SweptBefore() => "SweptBefore",
            RaiseSweptBefore(..) => "RaiseSweptBefore",
        }
    }

    pub fn request(&self) -> Request {
        use Op::*;
        match self {
            GetDevice(..)
            | DeviceProof(..)
            | WasCancelled(..)
            | GetReservation(..)
            | DueCount(..)
            | SweptBefore()
            | IdempotentAnswer(..)
            | ReadTokens(..)
            | ReadCeilingNotice(..) => Request::GetItem,
            PutDevice(..)
            | RegisterDevice(..)
            | CreateReservation(..)
            | KeepIdempotentAnswer(..) => Request::PutItem,
            DueCalls(..) => Request::Query,
            CancelReservation(..) => Request::TransactWriteItems,
            ProveDevice(..)
            | RemoveDevice(..)
            | RemoveAlertToken(..)
            | ConfirmCall(..)
            | WatchMinute(..)
            | RaiseSweptBefore(..)
            | ClaimWake(..)
            | ClaimDue(..)
            | MarkPushStarted(..)
            | ReleaseClaim(..)
            | FinishReservation(..)
            | ClaimNotice(..)
            | NoticeSent(..)
            | ReleaseNotice(..)
            | MarkBatch(..)
            | FenceBatch(..)
            | SettleBatch(..)
            | CountAgentUse(..)
            | CountPlanAnswer(..)
            | ReserveTokens(..)
            | SettleTokens(..)
            | ClaimCeilingNotice(..) => Request::UpdateItem,
        }
    }
}

/// The ports for every [`StoreLayer`], from one table: each method's [`Op`], its arguments and
/// its answer. The inner call is made only when the hook calls it.
macro_rules! layered {
    ($($port:ident { $($op:path: fn $method:ident($($arg:ident: $ty:ty),*) -> $answer:ty;)* })*) => {$(
        #[async_trait]
        impl<L: StoreLayer> $port for L {$(
            async fn $method(&self, $($arg: $ty),*) -> $answer {
                let inner = self.inner();
                self.around($op($($arg),*), &move || inner.$method($($arg),*))
                    .await
            }
        )*}
    )*};
}

type Answer<T> = Result<T, StoreError>;

layered! {
    DeviceStore {
        Op::PutDevice: fn put_device(device: &Device) -> Answer<()>;
        Op::register: fn register(register: RegisterRequest<'_>) -> Answer<DeviceWrite>;
        Op::GetDevice: fn get_device(id: &DeviceId, now: Time) -> Answer<Option<Device>>;
        Op::DeviceProof: fn device_proof(id: &DeviceId, now: Time) -> Answer<DeviceProof>;
        Op::prove: fn prove(proof: ProveRequest<'_>) -> Answer<bool>;
        Op::RemoveDevice: fn remove_device(id: &DeviceId, token: &VoipToken) -> Answer<bool>;
        Op::RemoveAlertToken: fn remove_alert_token(id: &DeviceId, token: &AlertToken) -> Answer<bool>;
    }
    ReservationStore {
        Op::create: fn create(create: CreateRequest<'_>) -> Result<Created, CreateError>;
        Op::WasCancelled: fn was_cancelled(call_id: &CallId, now: Time) -> Answer<bool>;
        Op::GetReservation: fn reservation_record(id: &DeviceId, now: Time) -> Answer<Option<Reservation>>;
        Op::cancel: fn cancel(cancel: CancelRequest<'_>) -> Result<(), CancelError>;
        Op::confirm: fn confirm(confirm: ConfirmRequest<'_>) -> Answer<ConfirmAnswer>;
    }
    DispatchStore {
        Op::DueCount: fn due_count(minute: &str) -> Answer<u32>;
        Op::DueCalls: fn due_calls(minute: &str, shard: u32) -> Answer<Vec<DueCall>>;
        Op::WatchMinute: fn watch_minute(minute: &str, until: Time) -> Answer<()>;
        Op::SweptBefore: fn swept_before() -> Answer<Option<Time>>;
        Op::RaiseSweptBefore: fn raise_swept_before(at: Time) -> Answer<()>;
        Op::wake_claim: fn wake_claim(wake: WakeClaim<'_>) -> Answer<bool>;
        Op::claim_call: fn claim_call(claim: ClaimCall<'_>) -> Answer<ClaimAnswer>;
        Op::run_write: fn run_write(call: RunCall<'_>, write: RunWrite) -> Answer<bool>;
        Op::batch_write: fn batch_write(write: BatchWrite<'_>) -> Answer<BatchFence>;
    }
    UsageStore {
        Op::usage: fn add_to_counter(request: UsageRequest<'_>) -> Answer<Option<i64>>;
    }
    IdempotencyStore {
        Op::IdempotentAnswer: fn idempotent_answer(key: &str, now: Time) -> Answer<Option<IdempotentAnswer>>;
        Op::KeepIdempotentAnswer: fn keep_idempotent_answer(
            answer: &IdempotentAnswer, now: Time) -> Answer<bool>;
    }
}
