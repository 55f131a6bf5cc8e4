//! The embedded store's dispatch port: the minute's count and watch, the shard's calls, and the
//! writes (claim, push mark, release, outcome, notice) with DynamoDB's conditions: each also
//! accepts a record its own run's token already wrote.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{MemoryStore, Tables};
use crate::domain::device::DeviceId;
use crate::domain::due::DueCall;
use crate::domain::reservation::{
    CallId, Reservation, ReservationStatus, RunToken, terminal_expiry,
};
use crate::store::prelude::*;
use crate::store::{
    BATCH_TTL, BatchFence, BatchWrite, ClaimAnswer, ClaimCall, ClaimMark, Outcome, RunCall,
    RunWrite, StoreError, WakeClaim,
};

/// Still `scheduled`, or `claimed` before `abandoned_before` (its run died) with its push never
/// started (a started push may have left).
fn is_claimable(r: &Reservation, abandoned_before: DateTime<Utc>) -> bool {
    match r.status {
        ReservationStatus::Scheduled => true,
        ReservationStatus::Claimed => {
            r.push_started_at.is_none()
                && r.mark_batch.is_none()
                && r.claimed_at.is_some_and(|c| c < abandoned_before)
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

    async fn wake_claim(&self, wake: WakeClaim<'_>) -> Result<bool, StoreError> {
        let mut tables = self.lock();
        if tables.raise_watch(wake.minute, wake.due_at, wake.until) {
            let claimant = wake.claimant.to_owned();
            tables
                .wake_claimants
                .insert(wake.minute.to_owned(), claimant);
            return Ok(true);
        }
        let stands = tables.wake_claimants.get(wake.minute);
        Ok(stands.is_some_and(|by| by == wake.claimant))
    }

    async fn claim_call(&self, claim: ClaimCall<'_>) -> Result<ClaimAnswer, StoreError> {
        let RunCall {
            id,
            call_id,
            run,
            now,
        } = claim.call;
        let tables = &mut *self.lock();
        let Some(r) = tables.reservations.get_mut(id) else {
            return Ok(ClaimAnswer::Refused(None));
        };
        let early = r.status == ReservationStatus::Scheduled
            && r.pushes > 0
            && r.due_at > now + crate::store::PUSH_AGAIN_CLAIM_LEAD;
        if &r.call_id != call_id
            || early
            || !(is_claimable(r, claim.abandoned_before) || claimed_by(r, run))
        {
            let current = (!r.is_expired(now)).then(|| Box::new(r.clone()));
            return Ok(ClaimAnswer::Refused(current));
        }
        r.status = ReservationStatus::Claimed;
        r.claimed_at = Some(now);
        r.claimed_by = Some(run.clone());
        r.updated_at = now;
        r.mark_batch = match claim.mark {
            ClaimMark::InBatch(batch) => Some(batch),
            ClaimMark::Apart => None,
        };
        Ok(ClaimAnswer::Won { pushes: r.pushes })
    }

    async fn batch_write(&self, w: BatchWrite<'_>) -> Result<BatchFence, StoreError> {
        Ok(self.lock().batch(w.run, w.batch, w.now, w.offer))
    }

    /// With DynamoDB's conditions: each also accepts a record its own run already wrote.
    async fn run_write(&self, call: RunCall<'_>, write: RunWrite) -> Result<bool, StoreError> {
        let RunCall { id, run, now, .. } = call;
        let tables = &mut *self.lock();
        let Some(r) = tables.call_mut(id, call.call_id) else {
            return Ok(false);
        };
        match write {
            RunWrite::MarkPushStarted { confirms } => {
                let mine = claimed_by(r, run);
                if mine {
                    r.push_started_at.get_or_insert(now);
                    r.confirms |= confirms;
                }
                Ok(mine)
            }
            RunWrite::Release if claimed_by(r, run) => {
                r.status = ReservationStatus::Scheduled;
                r.updated_at = now;
                drop_claim(r);
                Ok(true)
            }
            // Released before (this release made again after its reply was lost).
            RunWrite::Release => Ok(r.status == ReservationStatus::Scheduled),
            RunWrite::Finish {
                outcome,
                abandoned_before,
            } => {
                let finished = finish(r, outcome, run, now, abandoned_before);
                if finished && r.status.is_terminal() {
                    tables.unindex(id);
                }
                Ok(finished)
            }
            RunWrite::ClaimNotice => {
                let claimable =
                    ended_badly(r) && r.notice_claimed_by.as_ref().is_none_or(|c| c == run);
                if claimable {
                    r.notice_claimed_by = Some(run.clone());
                    // A released notice leaves the index with its claim.
                    r.notice_retry = false;
                    tables.unindex(id);
                }
                Ok(claimable)
            }
            RunWrite::ReleaseNotice { retry_at } => {
                let open = r.notice_sent_at.is_none() && ended_badly(r);
                let holds = r.notice_claimed_by.as_ref() == Some(run);
                // Made again after a lost reply: released, due then, unclaimed.
                let released =
                    r.notice_claimed_by.is_none() && r.notice_retry && r.due_at == retry_at;
                if !(open && (holds || released) && tables.notice_keys.contains_key(id)) {
                    return Ok(false);
                }
                let r = tables.call_mut(id, call.call_id).expect("found above");
                r.notice_claimed_by = None;
                r.notice_retry = true;
                r.due_at = retry_at;
                tables.reindex_for_notice(id);
                Ok(true)
            }
            RunWrite::SettleBatch { batch, marked_at } => {
                let names = claimed_by(r, run) && r.mark_batch == Some(batch);
                if names {
                    r.mark_batch = None;
                    if let Some(at) = marked_at {
                        r.push_started_at.get_or_insert(at);
                    }
                }
                Ok(names)
            }
            RunWrite::NoticeSent => {
                let holds = r.notice_claimed_by.as_ref() == Some(run);
                if holds {
                    r.notice_sent_at.get_or_insert(now);
                }
                Ok(holds)
            }
        }
    }
}

/// Records `outcome` by `run` on `r` if `DispatchStore::finish_reservation`'s rules allow it:
/// whether they did.
fn finish(
    r: &mut Reservation,
    outcome: Outcome,
    run: &RunToken,
    now: DateTime<Utc>,
    abandoned_before: DateTime<Utc>,
) -> bool {
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
        return false;
    }
    r.status = outcome.status();
    r.finished_by = Some(run.clone());
    r.updated_at = now;
    if let Outcome::Pushed { next_at, pushes } = outcome {
        // Due again, in the same bucket-index entry (its sort key moves).
        r.pushes = pushes;
        r.due_at = next_at;
        r.confirms = false;
        drop_claim(r);
        return true;
    }
    if outcome == Outcome::Sent {
        r.pushes = r.pushes.max(1);
    }
    r.expire_at = Some(terminal_expiry(now));
    true
}

/// Ended `failed`, `missed` or `unconfirmed`: a call with a missed-call notice.
fn ended_badly(r: &Reservation) -> bool {
    matches!(
        r.status,
        ReservationStatus::Failed | ReservationStatus::Missed | ReservationStatus::Unconfirmed
    )
}

/// Its claim and push mark gone (released, or due again).
fn drop_claim(r: &mut Reservation) {
    r.claimed_at = None;
    r.claimed_by = None;
    r.push_started_at = None;
    r.mark_batch = None;
}

impl Tables {
    /// The device's reservation if it is this call's.
    pub(super) fn call_mut(&mut self, id: &DeviceId, call_id: &CallId) -> Option<&mut Reservation> {
        self.reservations
            .get_mut(id)
            .filter(|r| &r.call_id == call_id)
    }

    /// `run`'s batch due at `batch`: its mark or fence, else `first` written now. Batches past
    /// [`BATCH_TTL`] go first, as DynamoDB's TTL deletes their `mark#` items.
    fn batch(
        &mut self,
        run: &RunToken,
        batch: DateTime<Utc>,
        now: DateTime<Utc>,
        first: BatchFence,
    ) -> BatchFence {
        self.batches.retain(|(_, at), _| *at + BATCH_TTL > now);
        *self.batches.entry((run.clone(), batch)).or_insert(first)
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

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    /// A batch's mark is kept a day, as DynamoDB's TTL keeps its `mark#` item: the embedded
    /// store forgets it after, so a local server running for days does not grow by each batch.
    #[tokio::test]
    async fn a_batch_past_its_ttl_is_forgotten_and_one_within_it_kept() {
        let store = MemoryStore::default();
        let (old, recent) = (RunToken::generate(), RunToken::generate());
        let t0 = Utc.with_ymd_and_hms(2026, 11, 29, 7, 0, 0).unwrap();
        assert!(store.mark_batch(&old, t0, t0).await.unwrap());
        let later = t0 + BATCH_TTL - chrono::Duration::seconds(1);
        assert!(store.mark_batch(&recent, later, later).await.unwrap());
        assert_eq!(store.lock().batches.len(), 2);

        // Within the day both stand; a day after the first, only the recent one is kept.
        let fence = store.fence_batch(&old, t0, later).await.unwrap();
        assert_eq!(fence, BatchFence::Marked(t0));
        let past = t0 + BATCH_TTL + chrono::Duration::seconds(1);
        let fence = store.fence_batch(&recent, later, past).await.unwrap();
        assert_eq!(fence, BatchFence::Marked(later));
        assert_eq!(
            store.lock().batches.len(),
            1,
            "the day-old batch is forgotten"
        );
    }
}
