//! The store's ports by concern ([`DeviceStore`], [`ReservationStore`], [`DispatchStore`],
//! [`UsageStore`], [`IdempotencyStore`]; [`Store`] is their sum, what an adapter implements).
//!
//! Two adapters with the same semantics, held to one contract test suite
//! (`shared/tests/it/store_contract/` and its `store_contract_*` siblings): DynamoDB
//! (`dynamodb`) and in-memory (`memory`).
//! Every conditional rule below is one conditional write in DynamoDB, so concurrent callers can
//! never both win. The store takes `now` from the caller (the app's `Clock`): records whose TTL
//! has passed are treated as absent even before DynamoDB deletes them.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::device::{AlertToken, Device, DeviceId, VoipToken};
use crate::domain::due::DueCall;
use crate::domain::reservation::{CallId, Reservation, RunToken};

mod answers;
mod deadlined;
mod error;
mod layer;
mod usage;
pub use answers::{
    CancelError, ClaimAnswer, ConfirmAnswer, CreateError, Created, DeviceProof, DeviceWrite,
    IdempotentAnswer, Outcome, SpendOutcome, UsageOutcome,
};
pub use deadlined::Deadlined;
pub use error::StoreError;
pub use layer::{Call, Op, Request, StoreLayer};
pub use usage::UsageRequest;
pub mod dynamodb;
pub mod memory;

/// Physical table names; part of the store's configuration section, where they are read.
pub use crate::platform::config::TableNames;

/// The name of the reservations table's time-bucket index (partition `dueShard`, a minute's
/// shard as `domain::due::shard_key` writes it; sort `scheduledAtMs`), holding only `scheduled`
/// and `claimed` reservations and ended ones whose notice was released for a later run
/// ([`DispatchStore::release_notice`]) (a sparse index), and of them only what [`DueCall`] needs.
pub const DUE_INDEX: &str = "byDueShard";

/// How long before its due time a call waiting for its push again may be claimed, at most (a
/// run claims it `claim_lead` before): a run that selected it before its last push cannot push
/// again before the confirmation wait is over.
pub const PUSH_AGAIN_CLAIM_LEAD: chrono::Duration = chrono::Duration::seconds(1);

/// How a claim ([`DispatchStore::claim_due`]) says where its push mark will be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimMark {
    /// The mark is a write of its own on the call, made later
    /// ([`DispatchStore::mark_push_started`]). For a device that confirms its calls: its
    /// confirmation refuses the mark of a push again not yet marked.
    Apart,
    /// The claim names the batch whose mark stands for its push's (`mark_batch` = `batch`, the
    /// start of the tenth of a second the run pushes it in): one write,
    /// [`DispatchStore::mark_batch`], marks every push of that batch by the claiming run, right
    /// before the first leaves. An abandoned claim naming a
    /// batch is not claimable until its batch is fenced ([`DispatchStore::fence_batch`]) and
    /// the claim settled ([`RunWrite::SettleBatch`]). For a device that does not confirm its
    /// calls.
    InBatch(DateTime<Utc>),
}

/// How long a batch's mark or fence is kept (DynamoDB's `expireAt` on `mark#` items): well
/// past any claim it could stand for.
pub const BATCH_TTL: chrono::Duration = chrono::Duration::days(1);

/// What [`DispatchStore::fence_batch`] found of a run's batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchFence {
    /// Not marked, and now never will be: none of the batch's pushes left.
    Fenced,
    /// Marked at this time: each of the batch's pushes may have left from then on.
    Marked(DateTime<Utc>),
}

/// A call that `run` has (or claims), as of `now`: what its writes
/// ([`DispatchStore::claim_call`], [`DispatchStore::run_write`]) share.
#[derive(Debug, Clone, Copy)]
pub struct RunCall<'a> {
    pub id: &'a DeviceId,
    pub call_id: &'a CallId,
    pub run: &'a RunToken,
    pub now: DateTime<Utc>,
}

impl<'a> RunCall<'a> {
    pub fn new(
        id: &'a DeviceId,
        call_id: &'a CallId,
        run: &'a RunToken,
        now: DateTime<Utc>,
    ) -> Self {
        RunCall {
            id,
            call_id,
            run,
            now,
        }
    }
}

/// [`DeviceStore::register_device`]'s request.
#[derive(Debug, Clone, Copy)]
pub struct RegisterRequest<'a> {
    pub device: &'a Device,
    pub presented: Option<&'a str>,
    pub new_secret_hash: &'a str,
}

/// [`DeviceStore::prove_device`]'s request.
#[derive(Debug, Clone, Copy)]
pub struct ProveRequest<'a> {
    pub id: &'a DeviceId,
    pub secret_hash: &'a str,
    pub now: DateTime<Utc>,
}

/// [`ReservationStore::create_reservation`]'s request.
#[derive(Debug, Clone, Copy)]
pub struct CreateRequest<'a> {
    pub reservation: &'a Reservation,
    pub now: DateTime<Utc>,
    pub stale_before: DateTime<Utc>,
}

/// [`ReservationStore::cancel_reservation`]'s request.
#[derive(Debug, Clone, Copy)]
pub struct CancelRequest<'a> {
    pub id: &'a DeviceId,
    pub call_id: Option<&'a CallId>,
    pub now: DateTime<Utc>,
    pub missed_before: DateTime<Utc>,
}

/// [`ReservationStore::confirm_call`]'s request.
#[derive(Debug, Clone, Copy)]
pub struct ConfirmRequest<'a> {
    pub id: &'a DeviceId,
    pub call_id: &'a CallId,
    pub now: DateTime<Utc>,
}

/// [`DispatchStore::mark_batch`]'s or [`DispatchStore::fence_batch`]'s request: `run`'s batch of
/// pushes due at `batch`, and the state offered (`Marked(now)` or `Fenced`).
#[derive(Debug, Clone, Copy)]
pub struct BatchWrite<'a> {
    pub run: &'a RunToken,
    pub batch: DateTime<Utc>,
    pub now: DateTime<Utc>,
    pub offer: BatchFence,
}

/// [`DispatchStore::claim_due`]'s request.
#[derive(Debug, Clone, Copy)]
pub struct ClaimCall<'a> {
    pub call: RunCall<'a>,
    pub abandoned_before: DateTime<Utc>,
    pub mark: ClaimMark,
}

/// [`DispatchStore::claim_wake`]'s request.
#[derive(Debug, Clone, Copy)]
pub struct WakeClaim<'a> {
    pub minute: &'a str,
    pub due_at: DateTime<Utc>,
    pub until: DateTime<Utc>,
    pub claimant: &'a str,
}

/// A write of a run's on its claim ([`DispatchStore::run_write`]): which port method it is,
/// with its own arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunWrite {
    /// [`DispatchStore::mark_push_started`].
    MarkPushStarted { confirms: bool },
    /// [`DispatchStore::release_claim`].
    Release,
    /// [`DispatchStore::finish_reservation`].
    Finish {
        outcome: Outcome,
        abandoned_before: DateTime<Utc>,
    },
    /// [`DispatchStore::claim_notice`].
    ClaimNotice,
    /// [`DispatchStore::notice_sent`].
    NoticeSent,
    /// [`DispatchStore::release_notice`].
    ReleaseNotice { retry_at: DateTime<Utc> },
    /// [`DispatchStore::settle_batch`].
    SettleBatch {
        batch: DateTime<Utc>,
        marked_at: Option<DateTime<Utc>>,
    },
}

/// Devices: registration, the device secret, the token the dispatcher reads.
#[async_trait]
pub trait DeviceStore: Send + Sync {
    /// Inserts or replaces the device's registration (tests and seeding; PUT /devices uses
    /// [`DeviceStore::register_device`]).
    async fn put_device(&self, device: &Device) -> Result<(), StoreError>;

    /// PUT /devices' write, atomically against the stored record's secret:
    /// - no record (or an expired one, past `expireAt` at `device.updated_at`): written with
    ///   `new_secret_hash`, not yet proven (`issued`);
    /// - `presented` equals the stored hash: written, proven from now on;
    /// - `presented` is another hash, or absent while the record is proven: [`DeviceWrite::Refused`];
    /// - absent and the record not proven: written with `new_secret_hash` (`issued`), replacing
    ///   any unproven secret (perhaps never delivered: the answer that carried it was lost);
    /// - the record holds `new_secret_hash` unproven (this request's write made again after its
    ///   reply was lost): written again, `issued`, whatever `presented` is.
    async fn register_device(
        &self,
        device: &Device,
        presented: Option<&str>,
        new_secret_hash: &str,
    ) -> Result<DeviceWrite, StoreError> {
        let register = RegisterRequest {
            device,
            presented,
            new_secret_hash,
        };
        self.register(register).await
    }

    /// [`DeviceStore::register_device`], as an adapter makes it.
    async fn register(&self, register: RegisterRequest<'_>) -> Result<DeviceWrite, StoreError>;

    /// The device's registration with its token; `None` if it has none, or its record expired
    /// (past `expireAt` at `now`: every device read treats such a record as absent, even before
    /// DynamoDB deletes it).
    async fn get_device(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<Option<Device>, StoreError>;

    /// The device's registration and secret state (a consistent read), for `/calls`; an
    /// expired record is [`DeviceProof::Unregistered`].
    async fn device_proof(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<DeviceProof, StoreError>;

    /// Records that the device's app presented its secret (`secret_hash`, the SHA-256 hex the
    /// record holds): from now on every request for the device must present it, as after a
    /// `PUT /devices` that presented it. Only if the record still holds that secret; returns
    /// whether it does (proven now or before).
    async fn prove_device(
        &self,
        id: &DeviceId,
        secret_hash: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let proof = ProveRequest {
            id,
            secret_hash,
            now,
        };
        self.prove(proof).await
    }

    /// [`DeviceStore::prove_device`], as an adapter makes it.
    async fn prove(&self, proof: ProveRequest<'_>) -> Result<bool, StoreError>;

    /// Removes the device's token (APNs called it dead), and its alert token with it, only if
    /// it is still `token` (a newer one wins). The device's secret and its state stay: the device keeps its proof, so the
    /// token cannot be replaced, nor its reservation read or cancelled, without the secret it
    /// had proven. Returns whether the token was removed.
    async fn remove_device(&self, id: &DeviceId, token: &VoipToken) -> Result<bool, StoreError>;

    /// Removes the device's alert token (APNs called it dead) only if it is still `token`; the
    /// rest of the record stays. Returns whether it was removed.
    async fn remove_alert_token(
        &self,
        id: &DeviceId,
        token: &AlertToken,
    ) -> Result<bool, StoreError>;
}

/// Call reservations as the API makes, reads, cancels and confirms them.
#[async_trait]
pub trait ReservationStore: Send + Sync {
    /// Stores `reservation` (status `scheduled`) as the device's one reservation, unless the
    /// device already holds one that is `scheduled` or `claimed` with its time at or after
    /// `stale_before` (older ones can no longer be sent and are replaced, as are terminal,
    /// cancelled or expired records), in a shard of its minute's count as it was before, and
    /// then counts it into its minute as an estimate: it adds `domain::due::COUNT_STEP` if its
    /// call id is one that counts (`domain::due::raises_count`), else nothing (a minute with no
    /// count has its reservations in shard 0, which every run queries). A refused or failed create leaves the
    /// minute's count as it was (one whose put's fate is unknown is counted as if made: too
    /// much costs shard queries, too little could only crowd shards). The same reservation (its
    /// `callId`) made again, as a retry after a lost reply does, is answered as created and
    /// changes nothing: not written over, not counted again; made again after it was
    /// cancelled, it is [`CreateError::Cancelled`], for as long as it could have rung.
    async fn create_reservation(
        &self,
        reservation: &Reservation,
        now: DateTime<Utc>,
        stale_before: DateTime<Utc>,
    ) -> Result<Created, CreateError> {
        let create = CreateRequest {
            reservation,
            now,
            stale_before,
        };
        self.create(create).await
    }

    /// [`ReservationStore::create_reservation`], as an adapter makes it.
    async fn create(&self, create: CreateRequest<'_>) -> Result<Created, CreateError>;

    /// Whether `call_id` was cancelled (its tombstone lives as long as the reservation could
    /// have: its TTL). A keyed create asks before it makes its (derived) `callId` again, so that
    /// a retry never brings back a cancelled reservation, even after the device's record has
    /// been replaced by a newer one.
    async fn was_cancelled(&self, call_id: &CallId, now: DateTime<Utc>)
    -> Result<bool, StoreError>;

    /// The device's reservation in any state; `None` if there is none, it was cancelled, or it
    /// has expired.
    async fn get_reservation(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<Option<Reservation>, StoreError> {
        let record = self.reservation_record(id, now).await?;
        Ok(record.filter(|r| r.status != crate::domain::reservation::ReservationStatus::Cancelled))
    }

    /// The device's record in any state, cancelled included (read consistently); `None` if
    /// none or expired. What [`ReservationStore::get_reservation`] reads, as an adapter does.
    async fn reservation_record(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<Option<Reservation>, StoreError>;

    /// Cancels the device's reservation if it is still `scheduled` (and is `call_id`, when
    /// given): it becomes `cancelled`, read as absent from then on. Without `call_id` it is the
    /// reservation the device holds at the first attempt: an attempt made again (its reply
    /// lost) never cancels a reservation made in between. A cancel made again of one it
    /// already cancelled answers `Ok`; with `call_id`, also once a newer reservation replaced
    /// it (its tombstone, [`ReservationStore::was_cancelled`], answers), cancelling nothing.
    /// A `scheduled` call due before `missed_before` (past grace: it can no longer ring) is
    /// [`CancelError::TooLate`] `missed`, told from the same read, so a DELETE reads once.
    async fn cancel_reservation(
        &self,
        id: &DeviceId,
        call_id: Option<&CallId>,
        now: DateTime<Utc>,
        missed_before: DateTime<Utc>,
    ) -> Result<(), CancelError> {
        let cancel = CancelRequest {
            id,
            call_id,
            now,
            missed_before,
        };
        self.cancel(cancel).await
    }

    /// [`ReservationStore::cancel_reservation`], as an adapter makes it.
    async fn cancel(&self, cancel: CancelRequest<'_>) -> Result<(), CancelError>;

    /// The device confirms that a push of `call_id` reached it (`POST /calls/confirm`): the
    /// reservation becomes `rang` at `now` (out of the bucket index, terminal expiry), if it is
    /// the device's with a push that left: `sent`, `unconfirmed`, waiting for its next push
    /// (`scheduled` with `pushes` > 0), or `claimed` for its first push (mark written or not: a
    /// confirmation before the outcome counts) or for a push again whose mark is not written
    /// (that push then never leaves: its mark is refused). A `claimed` push again whose mark is
    /// written is [`ConfirmAnswer::PushInFlight`]. Made again, it answers the same record (the
    /// first `rangAt` kept). `pushes` becomes at least 1. One conditional write over all those
    /// states: an outcome the run writes meanwhile never turns it into [`ConfirmAnswer::NotFound`].
    async fn confirm_call(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        now: DateTime<Utc>,
    ) -> Result<ConfirmAnswer, StoreError> {
        self.confirm(ConfirmRequest { id, call_id, now }).await
    }

    /// [`ReservationStore::confirm_call`], as an adapter makes it.
    async fn confirm(&self, confirm: ConfirmRequest<'_>) -> Result<ConfirmAnswer, StoreError>;
}

/// The dispatcher's requests: the minute's count, watch and shards, the claim, the push mark
/// and the outcome.
#[async_trait]
pub trait DispatchStore: Send + Sync {
    /// About how many reservations were made for the UTC minute `minute` (see
    /// `domain::reservation::minute_bucket`): 1 for each stored create that found it 0 (its
    /// first, or the few made at once with it) plus `domain::due::COUNT_STEP` for each later
    /// one whose call id counts (one in `COUNT_STEP`; a refused or failed create does not
    /// count), never decreasing (a cancel does not count down). `domain::due::shards_for` turns it into the minute's shards.
    async fn due_count(&self, minute: &str) -> Result<u32, StoreError>;

    /// The `scheduled` and `claimed` reservations in shard `shard` of `minute`'s bucket (and
    /// ended ones whose notice was released, due at its retry), in time order. A query on the
    /// bucket index, never a scan.
    async fn due_calls(&self, minute: &str, shard: u32) -> Result<Vec<DueCall>, StoreError>;

    /// A run's promise to select `minute` again, every few seconds, until `until`
    /// (`dispatch::wake`): raises the minute's watch to `until`, never lowers it.
    async fn watch_minute(&self, minute: &str, until: DateTime<Utc>) -> Result<(), StoreError>;

    /// The dispatcher's sweep mark (`dispatch::sweep`): every minute before it has been
    /// selected by some run, so none of its calls is left `scheduled`; `None` before the first.
    async fn swept_before(&self) -> Result<Option<DateTime<Utc>>, StoreError>;

    /// Raises the sweep mark to `at`, never lowers it (of runs at once, the latest stands).
    async fn raise_swept_before(&self, at: DateTime<Utc>) -> Result<(), StoreError>;

    /// A create's claim of the duty to wake a run for a call due at `due_at` in `minute`
    /// (`dispatch::wake`): unless the minute's watch already reaches `due_at`, raises it to
    /// `until` (the woken run's stay) and answers `true`: the caller wakes that run. Of
    /// creates at once, one claims it. The same `claimant` (a call id) asking again, as a retry
    /// after a lost reply does, is answered `true` again while its claim stands, changing
    /// nothing.
    async fn claim_wake(
        &self,
        minute: &str,
        due_at: DateTime<Utc>,
        until: DateTime<Utc>,
        claimant: &str,
    ) -> Result<bool, StoreError> {
        let wake = WakeClaim {
            minute,
            due_at,
            until,
            claimant,
        };
        self.wake_claim(wake).await
    }

    /// [`DispatchStore::claim_wake`], as an adapter makes it.
    async fn wake_claim(&self, wake: WakeClaim<'_>) -> Result<bool, StoreError>;

    /// `scheduled` → `claimed` by `run` for this call (one waiting for its push again only from
    /// [`PUSH_AGAIN_CLAIM_LEAD`] before it is due), or re-claims a claim made before
    /// `abandoned_before` (its run died) whose push never started ([`DispatchStore::mark_push_started`]).
    /// A claim `run` already holds is won again (its reply may have been lost): `claimed_at`
    /// becomes `now`. With [`ClaimMark::InBatch`] the claim names its batch (`mark_batch`); an
    /// abandoned claim that names one is refused until it is settled
    /// ([`DispatchStore::settle_batch`]). A refusal carries the record as it is (if
    /// there is one), so the caller can tell a live claim from an abandoned one whose push had
    /// started.
    async fn claim_due(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
        abandoned_before: DateTime<Utc>,
        mark: ClaimMark,
    ) -> Result<ClaimAnswer, StoreError> {
        let call = RunCall::new(id, call_id, run, now);
        let claim = ClaimCall {
            call,
            abandoned_before,
            mark,
        };
        self.claim_call(claim).await
    }

    /// [`DispatchStore::claim_due`], as an adapter makes it.
    async fn claim_call(&self, claim: ClaimCall<'_>) -> Result<ClaimAnswer, StoreError>;

    /// [`DispatchStore::claim_due`] of the claim alone ([`ClaimMark::Apart`]), answering only
    /// whether this caller won the claim.
    async fn claim_reservation(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
        abandoned_before: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let answer = self
            .claim_due(id, call_id, run, now, abandoned_before, ClaimMark::Apart)
            .await?;
        Ok(matches!(answer, ClaimAnswer::Won { .. }))
    }

    /// Marks that `run`, whose claim the reservation holds (made [`ClaimMark::Apart`]), is about
    /// to push (sets
    /// `push_started_at` to `now`, unless this run's earlier mark already set it, and
    /// `confirms`: the device confirms its calls, so if this run stops the push counts as left
    /// and is made again). Only a
    /// marked claim may push; a marked claim is never re-claimed nor marked `missed`, so a run
    /// that dies after marking leaves the call to be recorded `failed` (push state unknown),
    /// never pushed twice. Returns whether the claim is still `run`'s (made again after a lost
    /// reply, it answers the same).
    async fn mark_push_started(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
        confirms: bool,
    ) -> Result<bool, StoreError> {
        let write = RunWrite::MarkPushStarted { confirms };
        self.run_write(RunCall::new(id, call_id, run, now), write)
            .await
    }

    /// Gives a claim `run` holds back (`claimed` → `scheduled`, its claim and mark removed), for
    /// a run that could not resolve its push mark in time and knows its push did not leave: the
    /// call is sent by a later selection instead of ending `failed`. Returns whether the
    /// reservation is now `scheduled` (released by this call, or by an earlier one whose reply
    /// was lost); false if another run has it, or it ended.
    async fn release_claim(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.run_write(RunCall::new(id, call_id, run, now), RunWrite::Release)
            .await
    }

    /// Records how the call ended, by `run`: `claimed` → `sent`/`failed`, or `scheduled` (or a
    /// claim made before `abandoned_before` whose push never started) → `missed` (a call with
    /// `pushes` > 0 is never `missed`). For a device that confirms its calls:
    /// [`Outcome::Pushed`] counts the push (`pushes` + 1) and makes the call `scheduled` again,
    /// due at `next_at`, its claim and mark removed (from its own claim, or from a claim made
    /// before `abandoned_before` whose push started, with `confirms`: that push may have left);
    /// [`Outcome::Unconfirmed`] ends it from its own claim, from `scheduled` with `pushes` > 0,
    /// or from such an abandoned claim. Terminal records get `expireAt` and leave the bucket
    /// index. Returns whether the transition happened; a record `run` already wrote with this
    /// outcome answers true (the reply to the first write was lost).
    async fn finish_reservation(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        outcome: Outcome,
        run: &RunToken,
        now: DateTime<Utc>,
        abandoned_before: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let write = RunWrite::Finish {
            outcome,
            abandoned_before,
        };
        self.run_write(RunCall::new(id, call_id, run, now), write)
            .await
    }

    /// Claims the missed-call notice of `call_id` for `run` (docs/dispatch.md, "Missed-call
    /// notice"): only while the device's reservation is that call, ended `failed`, `missed` or
    /// `unconfirmed`, with its notice unclaimed or already `run`'s (a claim made again after
    /// its reply was lost). Whether `run` holds it: of runs at once, one does. A notice
    /// released for a later run ([`DispatchStore::release_notice`]) leaves the bucket index
    /// with this claim.
    async fn claim_notice(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.run_write(RunCall::new(id, call_id, run, now), RunWrite::ClaimNotice)
            .await
    }

    /// Records that `run`'s notice of `call_id` left at `now` (`notice_sent_at`), if `run` holds
    /// its claim; made again, it keeps the first time and answers the same.
    async fn notice_sent(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.run_write(RunCall::new(id, call_id, run, now), RunWrite::NoticeSent)
            .await
    }

    /// Gives back the notice `run` claimed and could not send (every push of it surely
    /// failed: APNs did not take it), for a later run: only while `run` holds its claim and no
    /// `notice_sent_at` is recorded. Its claim goes, and the call is back in the bucket index
    /// in its minute's shard (the one it was in before it ended), due at `retry_at`, with
    /// `notice_retry` set: a run that selects it sends the notice alone. Made again after a
    /// lost reply, it finds its own release and answers the same. Whether it is released.
    async fn release_notice(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
        retry_at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let write = RunWrite::ReleaseNotice { retry_at };
        self.run_write(RunCall::new(id, call_id, run, now), write)
            .await
    }

    /// A run's mark of its batch of pushes `batch` (the claims it made [`ClaimMark::InBatch`]
    /// with it): from now on each may have left. Written right before the first leaves; one
    /// small item, whatever the batch's size. Whether it stands: made
    /// again (a lost reply) it answers true and keeps the first time; `false` if another run
    /// fenced the batch first ([`DispatchStore::fence_batch`]), so none of them may leave.
    async fn mark_batch(
        &self,
        run: &RunToken,
        batch: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mark = BatchWrite {
            run,
            batch,
            now,
            offer: BatchFence::Marked(now),
        };
        Ok(matches!(
            self.batch_write(mark).await?,
            BatchFence::Marked(_)
        ))
    }

    /// Another run's fence on `claimant`'s batch of pushes `batch`, for a claim of it
    /// found abandoned: unless the batch is marked, it can never be from now on
    /// ([`BatchFence::Fenced`]: none of its pushes left, and none will); else when it was
    /// ([`BatchFence::Marked`]). Of a mark and a fence, the first written stands.
    async fn fence_batch(
        &self,
        claimant: &RunToken,
        batch: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<BatchFence, StoreError> {
        let fence = BatchWrite {
            run: claimant,
            batch,
            now,
            offer: BatchFence::Fenced,
        };
        self.batch_write(fence).await
    }

    /// [`DispatchStore::mark_batch`] and [`DispatchStore::fence_batch`], as an adapter makes
    /// them: the batch's first written state, the one offered unless the other came first (a
    /// mark and a fence are each other's condition). A mark that stands may answer the time
    /// offered rather than the first mark's.
    async fn batch_write(&self, write: BatchWrite<'_>) -> Result<BatchFence, StoreError>;

    /// Settles `claimant`'s claim of `call_id` that names its batch `batch` once that batch is
    /// fenced or found marked ([`DispatchStore::fence_batch`]): the claim no longer names it,
    /// and, if it was marked (`marked_at`), carries the push mark from then, as after
    /// [`DispatchStore::mark_push_started`]. From then on the abandoned claim is like any other:
    /// unmarked, it is claimable; marked, it ends `failed` (push state unknown). Whether this
    /// write settled it (`false`: settled before, taken over, or ended).
    async fn settle_batch(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        claimant: &RunToken,
        now: DateTime<Utc>,
        (batch, marked_at): (DateTime<Utc>, Option<DateTime<Utc>>),
    ) -> Result<bool, StoreError> {
        let write = RunWrite::SettleBatch { batch, marked_at };
        self.run_write(RunCall::new(id, call_id, claimant, now), write)
            .await
    }

    /// The writes of `run` on its claim of a call that answer whether they were made
    /// ([`DispatchStore::mark_push_started`], [`DispatchStore::release_claim`],
    /// [`DispatchStore::finish_reservation`], [`DispatchStore::claim_notice`],
    /// [`DispatchStore::notice_sent`], [`DispatchStore::release_notice`],
    /// [`DispatchStore::settle_batch`]), as an adapter makes them.
    async fn run_write(&self, call: RunCall<'_>, write: RunWrite) -> Result<bool, StoreError>;
}

/// The agent's daily use, its plans' answers and the APIs' daily token counts.
#[async_trait]
pub trait UsageStore: Send + Sync {
    /// Counts one agent use for the device on `day` unless `limit` is already reached; one
    /// atomic conditional update. `expire_at` (epoch seconds) is the counter's TTL.
    async fn count_agent_use(
        &self,
        id: &DeviceId,
        day: &str,
        limit: u32,
        expire_at: i64,
    ) -> Result<UsageOutcome, StoreError> {
        let request = UsageRequest::AgentUse(id, day, limit, expire_at);
        Ok(counted(self.add_to_counter(request).await?))
    }

    /// Counts one round-2 answer of the agent plan `plan_id` unless `limit` answers were
    /// already counted; one atomic conditional update, as [`UsageStore::count_agent_use`].
    /// `expire_at` (epoch seconds) is the counter's TTL.
    async fn count_plan_answer(
        &self,
        plan_id: &str,
        limit: u32,
        expire_at: i64,
    ) -> Result<UsageOutcome, StoreError> {
        let request = UsageRequest::PlanAnswer(plan_id, limit, expire_at);
        Ok(counted(self.add_to_counter(request).await?))
    }

    /// Adds `tokens` to the day's token count of `handlers` (`chat`, `agent`) unless the count has
    /// already reached `ceiling`; one atomic conditional update. `expire_at` is its TTL.
    async fn reserve_tokens(
        &self,
        api: &str,
        day: &str,
        tokens: u64,
        ceiling: u64,
        expire_at: i64,
    ) -> Result<SpendOutcome, StoreError> {
        let request = UsageRequest::ReserveTokens(api, day, tokens, ceiling, expire_at);
        Ok(match self.add_to_counter(request).await? {
            Some(total) => SpendOutcome::Reserved {
                total: total.max(0) as u64,
            },
            None => SpendOutcome::CeilingReached,
        })
    }

    /// The day's token count of `api` as it stands (0 before its first reservation): one
    /// eventually consistent read, no write (what a guard reads before it leases).
    async fn read_tokens(&self, api: &str, day: &str) -> Result<u64, StoreError> {
        let request = UsageRequest::ReadTokens(api, day);
        Ok(self.add_to_counter(request).await?.unwrap_or(0).max(0) as u64)
    }

    /// Corrects the day's token count of `handlers` by `delta` (the reported usage minus what was
    /// reserved; negative to give back), unconditionally and atomically.
    async fn settle_tokens(
        &self,
        api: &str,
        day: &str,
        delta: i64,
        expire_at: i64,
    ) -> Result<(), StoreError> {
        let request = UsageRequest::SettleTokens(api, day, delta, expire_at);
        self.add_to_counter(request).await.map(drop)
    }

    /// Claims the one notice of `handlers`'s ceiling on `day`: true for exactly one caller.
    async fn claim_ceiling_notice(
        &self,
        api: &str,
        day: &str,
        expire_at: i64,
    ) -> Result<bool, StoreError> {
        let request = UsageRequest::CeilingNotice(api, day, expire_at);
        Ok(self.add_to_counter(request).await?.is_some())
    }

    /// Whether `handlers`'s ceiling notice on `day` was claimed: one eventually consistent read,
    /// no write (a guard reads it before it claims).
    async fn ceiling_noticed(&self, api: &str, day: &str) -> Result<bool, StoreError> {
        let request = UsageRequest::ReadNotice(api, day);
        Ok(self.add_to_counter(request).await?.unwrap_or(0) > 0)
    }

    /// The one request of each method above, as an adapter makes it: adds
    /// [`UsageRequest::amount`] to its counter, with its TTL, unless the counter already reached
    /// [`UsageRequest::limit`]. The new count; `None` if the limit was reached (nothing added).
    /// A [`UsageRequest::ReadTokens`] writes nothing: the count as it stands.
    async fn add_to_counter(&self, request: UsageRequest<'_>) -> Result<Option<i64>, StoreError>;
}

/// A count's answer from its counter's new value.
fn counted(count: Option<i64>) -> UsageOutcome {
    match count {
        Some(count) => UsageOutcome::Counted {
            count: u32::try_from(count.max(0)).unwrap_or(u32::MAX),
        },
        None => UsageOutcome::LimitReached,
    }
}

/// Kept answers of `Idempotency-Key` requests.
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// The answer kept under `key`, unless there is none or it expired by `now`.
    async fn idempotent_answer(
        &self,
        key: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<IdempotentAnswer>, StoreError>;

    /// Keeps `answer` under its key unless a live answer is already kept there (the first one
    /// wins; one conditional write). Returns whether it was kept.
    async fn keep_idempotent_answer(
        &self,
        answer: &IdempotentAnswer,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
}

/// Every port of the store at once: what an adapter (DynamoDB, memory) implements, what a
/// [`StoreLayer`] is by its one hook, and what `wiring::App` hands out; a user that needs less
/// names its port.
pub trait Store:
    DeviceStore + ReservationStore + DispatchStore + UsageStore + IdempotencyStore
{
}

impl<T> Store for T where
    T: DeviceStore + ReservationStore + DispatchStore + UsageStore + IdempotencyStore
{
}

/// The store's traits, for calling their methods (`use koe::store::prelude::*`).
pub mod prelude {
    pub use super::{
        DeviceStore, DispatchStore, IdempotencyStore, ReservationStore, Store, UsageStore,
    };
}
