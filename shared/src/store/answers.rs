//! What the `Store` port's requests answer: the outcomes of creates, cancels, claims,
//! counters and device writes, and their errors.

use super::StoreError;
use chrono::{DateTime, Utc};

use crate::domain::reservation::{Reservation, ReservationStatus};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateError {
    /// A `scheduled` or `claimed` reservation that is not stale holds the device's slot.
    Exists,
    /// This very reservation (its `callId`) was made and then cancelled: a retry of its create
    /// never brings it back.
    Cancelled,
    Store(StoreError),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelError {
    NotFound,
    /// Already claimed (or past): the push goes, or went, out.
    TooLate(ReservationStatus),
    Store(StoreError),
}

impl CancelError {
    /// What a cancel does with the device's record as it read it (the one it names, if
    /// `named`): `Ok(true)` cancels it; `Ok(false)`: it is already this cancel's (an attempt
    /// made again after its reply was lost); or why not: `missed` past grace (`missed_before`),
    /// `sent` once a push left, the status of any other state.
    pub(crate) fn check(
        record: &Reservation,
        named: bool,
        missed_before: DateTime<Utc>,
    ) -> Result<bool, CancelError> {
        match (record.status, record.status_seen(missed_before)) {
            (ReservationStatus::Scheduled, ReservationStatus::Scheduled) => Ok(true),
            (ReservationStatus::Cancelled, _) if named => Ok(false),
            (ReservationStatus::Cancelled, _) => Err(CancelError::NotFound),
            (_, seen) => Err(CancelError::TooLate(seen)),
        }
    }
}

impl From<StoreError> for CreateError {
    fn from(e: StoreError) -> Self {
        CreateError::Store(e)
    }
}

impl From<StoreError> for CancelError {
    fn from(e: StoreError) -> Self {
        CancelError::Store(e)
    }
}

/// What a create ([`ReservationStore::create_reservation`](super::ReservationStore)) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// Written (and counted) now. `minute_count`: its minute's count (`due#<minute>`) just
    /// after this create raised it by `domain::due::COUNT_STEP` (its call id is one that
    /// counts); `None` when this create did not raise it: a call id that does not count, a
    /// retry that finds its own count, a failure. Each raise adds the step, so the raise that takes the count past a
    /// figure is the one whose count, less the step, was below it.
    New { minute_count: Option<u32> },
    /// This very reservation (its `callId`) was already there, written by an earlier attempt
    /// whose reply was lost or by an earlier copy of the same create: as it is stored now.
    Already(Box<Reservation>),
}

/// What a claim ([`DispatchStore::claim_due`](super::DispatchStore)) answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimAnswer {
    /// Won; `pushes`: how many pushes already left for the call (0 for its first push).
    Won { pushes: u32 },
    /// Refused; the device's record as it is now (`None`: none, or expired).
    Refused(Option<Box<Reservation>>),
}

/// How a claimed (or overdue) reservation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Sent,
    Failed,
    /// Past grace without a push (or, for one whose push left already, [`Outcome::Unconfirmed`]).
    Missed,
    /// A push to a device that confirms its calls left (or may have, from a run that stopped
    /// after its mark): counted, and the call is due again at `next_at` unless confirmed first.
    /// `pushes` is the call's count with this push (the count before it, plus one).
    Pushed {
        next_at: DateTime<Utc>,
        pushes: u32,
    },
    /// Every push left and none was confirmed by the end of the last wait (or grace ended).
    Unconfirmed,
}

impl Outcome {
    pub fn status(self) -> ReservationStatus {
        match self {
            Outcome::Sent => ReservationStatus::Sent,
            Outcome::Failed => ReservationStatus::Failed,
            Outcome::Missed => ReservationStatus::Missed,
            Outcome::Pushed { .. } => ReservationStatus::Scheduled,
            Outcome::Unconfirmed => ReservationStatus::Unconfirmed,
        }
    }
}

/// What a device's confirmation of a call push
/// ([`ReservationStore::confirm_call`](super::ReservationStore)) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfirmAnswer {
    /// Recorded (`rang`, now or by an earlier confirmation): the record as it is now.
    Rang(Box<Reservation>),
    /// A push again of this call is leaving right now (claimed, marked, after an earlier push):
    /// the confirmation is not stored until it has left, so that no push follows a stored
    /// confirmation. Ask again in a moment.
    PushInFlight,
    /// The device holds no such reservation with a push that left (none, another call, not
    /// pushed yet, cancelled, failed, missed or expired).
    NotFound,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageOutcome {
    /// Counted; `count` is the day's total including this use.
    Counted { count: u32 },
    /// The limit was already reached; nothing was counted.
    LimitReached,
}

/// What a reservation of model tokens against a daily ceiling said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpendOutcome {
    /// Reserved; `total` is the day's count including this reservation.
    Reserved { total: u64 },
    /// The day's count had already reached the ceiling; nothing was reserved.
    CeilingReached,
}

/// The first answer to a request made with an `Idempotency-Key`, kept so that a retry of the
/// same request gets it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotentAnswer {
    /// The route's name and a digest of the client's key (`calls#<sha256 hex>`).
    pub key: String,
    /// SHA-256 (hex) of the request body the answer is for.
    pub request_hash: String,
    pub status: u16,
    /// The answer's JSON body, byte for byte.
    pub body: String,
    /// Until when (epoch seconds) a retry gets this answer; also the record's TTL.
    pub expire_at: i64,
}

/// What PUT /devices may do with a device's registration, given the device secret's state
/// (see docs/security.md, "Device-scoped access").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceWrite {
    /// Written. `issued`: the SHA-256 (hex) of a new secret now stored for the device (a new
    /// device, a record from before secrets, or one whose secret was not proven); `proven`: the
    /// request presented the stored secret, and the record now demands it.
    Written { issued: bool, proven: bool },
    /// Not written: the record demands its secret (proven before) and the request presented
    /// none, or presented another.
    Refused,
}

/// A device's registration as `/calls` checks the device secret against it (docs/security.md,
/// "Device-scoped access"): the same rule as `PUT /devices`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceProof {
    /// No record (never registered, or expired by its TTL).
    Unregistered,
    /// `secret_hash`: SHA-256 (hex) of its secret, if it has one; `proven`: its app has
    /// presented it, so every request for the device must; `has_token`: it has a VoIP token to
    /// push to (none once APNs called its token dead: the token is removed, the secret kept).
    Registered {
        secret_hash: Option<String>,
        proven: bool,
        has_token: bool,
    },
}

impl DeviceProof {
    /// Whether a request presenting `presented` (the SHA-256 of its `X-Device-Secret`, if any)
    /// may act for the device: a presented secret must be the device's; none is enough only
    /// while the device's secret is not proven.
    pub fn admits(&self, presented: Option<&str>) -> bool {
        match (self, presented) {
            (DeviceProof::Unregistered, _) => true,
            (
                DeviceProof::Registered {
                    secret_hash: Some(hash),
                    ..
                },
                Some(presented),
            ) => hash == presented,
            (DeviceProof::Registered { .. }, Some(_)) => false,
            (DeviceProof::Registered { proven, .. }, None) => !proven,
        }
    }

    /// Whether the device has a VoIP token (a call can be reserved for it).
    pub fn has_token(&self) -> bool {
        matches!(
            self,
            DeviceProof::Registered {
                has_token: true,
                ..
            }
        )
    }
}
