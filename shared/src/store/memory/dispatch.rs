//! The embedded store's dispatch port: the minute's count and watch, the shard's calls, and the
//! writes (claim, push mark, release, outcome) with DynamoDB's conditions: each also accepts a
//! record its own run's token already wrote.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{MemoryStore, Tables};
use crate::domain::device::DeviceId;
use crate::domain::due::DueCall;
use crate::domain::reservation::{
    CallId, Reservation, ReservationStatus, RunToken, terminal_expiry,
};
use crate::store::prelude::*;
use crate::store::{ClaimAnswer, ClaimMark, Outcome, StoreError};

/// Still `scheduled`, or `claimed` before `abandoned_before` (its run died) with its push never
/// started (a started push may have left).
fn is_claimable(r: &Reservation, abandoned_before: DateTime<Utc>) -> bool {
    match r.status {
        ReservationStatus::Scheduled => true,
        ReservationStatus::Claimed => {
            r.push_started_at.is_none() && r.claimed_at.is_some_and(|c| c < abandoned_before)
        }
        _ => false,
    }
}

/// `claimed` by `run` (its claim, whatever became of the reply).
fn claimed_by(r: &Reservation, run: &RunToken) -> bool {
    r.status == ReservationStatus::Claimed && r.claimed_by.as_ref() == Some(run)
}

#[async_trait]
impl DispatchStore for MemoryStore {
    async fn due_count(&self, minute: &str) -> Result<u32, StoreError> {
        Ok(self.lock().due_counts.get(minute).copied().unwrap_or(0))
    }

    async fn due_calls(&self, minute: &str, shard: u32) -> Result<Vec<DueCall>, StoreError> {
        Ok(self.lock().due_calls(minute, shard))
    }

    async fn swept_before(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        Ok(self.lock().swept_before)
    }

    async fn raise_swept_before(&self, at: DateTime<Utc>) -> Result<(), StoreError> {
        let mut tables = self.lock();
        tables.swept_before = tables.swept_before.max(Some(at));
        Ok(())
    }

    async fn watch_minute(&self, minute: &str, until: DateTime<Utc>) -> Result<(), StoreError> {
        let mut tables = self.lock();
        // A promise beyond the claimed stay supersedes the claim (as DynamoDB's `REMOVE`).
        if tables.raise_watch(minute, until, until) {
            tables.wake_claimants.remove(minute);
        }
        Ok(())
    }

    async fn claim_wake(
        &self,
        minute: &str,
        due_at: DateTime<Utc>,
        until: DateTime<Utc>,
        claimant: &str,
    ) -> Result<bool, StoreError> {
        let mut tables = self.lock();
        if tables.raise_watch(minute, due_at, until) {
            let claimant = claimant.to_owned();
            tables.wake_claimants.insert(minute.to_owned(), claimant);
            return Ok(true);
        }
        let stands = tables.wake_claimants.get(minute);
        Ok(stands.is_some_and(|by| by == claimant))
    }

    async fn claim_due(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
        abandoned_before: DateTime<Utc>,
        mark: ClaimMark,
    ) -> Result<ClaimAnswer, StoreError> {
        let tables = &mut *self.lock();
        let Some(r) = tables.reservations.get_mut(id) else {
            return Ok(ClaimAnswer::Refused(None));
        };
        let early = r.status == ReservationStatus::Scheduled
            && r.pushes > 0
            && r.due_at > now + crate::store::PUSH_AGAIN_CLAIM_LEAD;
        if &r.call_id != call_id
            || early
            || !(is_claimable(r, abandoned_before) || claimed_by(r, run))
        {
            let current = (!r.is_expired(now)).then(|| Box::new(r.clone()));
            return Ok(ClaimAnswer::Refused(current));
        }
        r.status = ReservationStatus::Claimed;
        r.claimed_at = Some(now);
        r.claimed_by = Some(run.clone());
        r.updated_at = now;
        if mark == ClaimMark::WithClaim {
            // Made again after a lost reply, the first mark's time stays.
            r.push_started_at.get_or_insert(now);
        }
        Ok(ClaimAnswer::Won { pushes: r.pushes })
    }

    async fn mark_push_started(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
        confirms: bool,
    ) -> Result<bool, StoreError> {
        let tables = &mut *self.lock();
        Ok(match tables.call_mut(id, call_id) {
            Some(r) if claimed_by(r, run) => {
                r.push_started_at.get_or_insert(now);
                r.confirms |= confirms;
                true
            }
            _ => false,
        })
    }

    async fn release_claim(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let tables = &mut *self.lock();
        Ok(match tables.call_mut(id, call_id) {
            Some(r) if claimed_by(r, run) => {
                r.status = ReservationStatus::Scheduled;
                r.claimed_at = None;
                r.claimed_by = None;
                r.push_started_at = None;
                r.updated_at = now;
                true
            }
            Some(r) => r.status == ReservationStatus::Scheduled,
            None => false,
        })
    }

    async fn finish_reservation(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        outcome: Outcome,
        run: &RunToken,
        now: DateTime<Utc>,
        abandoned_before: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let tables = &mut *self.lock();
        let Some(r) = tables.call_mut(id, call_id) else {
            return Ok(false);
        };
        // This run's own outcome (its reply lost) is written again, as DynamoDB's SET does.
        let own = r.status == outcome.status()
            && r.finished_by.as_ref() == Some(run)
            && match outcome {
                Outcome::Pushed { next_at, pushes } => r.due_at == next_at && r.pushes == pushes,
                _ => true,
            };
        let allowed = own
            || match outcome {
                Outcome::Sent | Outcome::Failed => r.status == ReservationStatus::Claimed,
                Outcome::Missed => is_claimable(r, abandoned_before) && r.pushes == 0,
                Outcome::Pushed { pushes, .. } => {
                    r.pushes + 1 == pushes
                        && (claimed_by(r, run) || pushed_then_abandoned(r, abandoned_before))
                }
                Outcome::Unconfirmed => {
                    claimed_by(r, run)
                        || pushed_then_abandoned(r, abandoned_before)
                        || (r.status == ReservationStatus::Scheduled && r.pushes > 0)
                }
            };
        if !allowed {
            return Ok(false);
        }
        r.status = outcome.status();
        r.finished_by = Some(run.clone());
        r.updated_at = now;
        if let Outcome::Pushed { next_at, pushes } = outcome {
            // Due again, in the same bucket-index entry (its sort key moves).
            r.pushes = pushes;
            r.due_at = next_at;
            r.claimed_at = None;
            r.claimed_by = None;
            r.push_started_at = None;
            r.confirms = false;
            return Ok(true);
        }
        if outcome == Outcome::Sent {
            r.pushes = r.pushes.max(1);
        }
        r.expire_at = Some(terminal_expiry(now));
        tables.unindex(id);
        Ok(true)
    }

    async fn claim_notice(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        _now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let tables = &mut *self.lock();
        Ok(match tables.call_mut(id, call_id) {
            Some(r)
                if matches!(
                    r.status,
                    ReservationStatus::Failed
                        | ReservationStatus::Missed
                        | ReservationStatus::Unconfirmed
                ) && r.notice_claimed_by.as_ref().is_none_or(|c| c == run) =>
            {
                r.notice_claimed_by = Some(run.clone());
                true
            }
            _ => false,
        })
    }

    async fn notice_sent(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let tables = &mut *self.lock();
        Ok(match tables.call_mut(id, call_id) {
            Some(r) if r.notice_claimed_by.as_ref() == Some(run) => {
                r.notice_sent_at.get_or_insert(now);
                true
            }
            _ => false,
        })
    }
}

impl Tables {
    /// The device's reservation if it is this call's.
    pub(super) fn call_mut(&mut self, id: &DeviceId, call_id: &CallId) -> Option<&mut Reservation> {
        self.reservations
            .get_mut(id)
            .filter(|r| &r.call_id == call_id)
    }
}

/// A claim made before `abandoned_before` whose push started, to a device that confirms its
/// calls: its run stopped and the push may have left, so it counts and goes again.
fn pushed_then_abandoned(r: &Reservation, abandoned_before: DateTime<Utc>) -> bool {
    r.status == ReservationStatus::Claimed
        && r.confirms
        && r.push_started_at.is_some()
        && r.claimed_at.is_some_and(|c| c < abandoned_before)
}
