//! A run's batch marks (`ClaimMark::InBatch`): one write for all of its pushes due in one tenth
//! of a second ([`batch_of`]), made when the first of them is due, right before it leaves
//! ([`Run::batch_marked`]), so that the mark says a push may have left only once it may,
//! however crowded the second; and, for a claim another run abandoned naming its batch, the
//! fence that tells whether that batch's pushes may have left, and the claim settled by it
//! ([`Run::settle_abandoned`]).
//! docs/dispatch.md, "Exactly once".

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

use super::plan::SLOT;
use super::run_state::Run;
use crate::domain::due::DueCall;
use crate::domain::reservation::{Reservation, ReservationStatus, RunToken};
use crate::store::BatchFence;

impl Run {
    /// Whether this run's mark of its batch `batch` ([`batch_of`]) stands (`None`: no answer by
    /// `deadline`; the next push of the batch to get here asks again). Made once for the
    /// batch: the first of its pushes to get here writes it, made again until answered, and
    /// the others wait for its answer.
    pub(super) async fn batch_marked(
        &self,
        batch: DateTime<Utc>,
        deadline: DateTime<Utc>,
    ) -> Option<bool> {
        let cell = Arc::clone(lock(&self.batches.marks).entry(batch).or_default());
        let answer = *cell
            .get_or_init(|| async {
                self.dispatcher.plan.batch_mark(self.clock().now());
                let marked = self
                    .resolved(deadline, || async {
                        let _permits = (self.permit().await, self.store_permit().await);
                        let now = self.clock().now();
                        self.dispatcher
                            .store
                            .mark_batch(&self.token, batch, now)
                            .await
                    })
                    .await;
                marked
                    .inspect_err(|e| tracing::error!(error = %e, "dispatch batch mark failed"))
                    .ok()
            })
            .await;
        if answer.is_none() {
            let mut marks = lock(&self.batches.marks);
            if marks.get(&batch).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                marks.remove(&batch);
            }
        }
        answer
    }

    /// Settles `current`, a claim of `r` that another run abandoned naming its batch
    /// ([`abandoned_in_batch`]): fences the batch (once a run) and settles the claim by what
    /// that found: unmarked, it is claimable again; marked, it carries the push mark. Whether
    /// it was answered by `deadline` (settled by this run, or before it).
    pub(super) async fn settle_abandoned(
        &self,
        r: &DueCall,
        current: &Reservation,
        deadline: DateTime<Utc>,
    ) -> bool {
        let (Some(claimant), Some(batch)) = (current.claimed_by.as_ref(), current.mark_batch)
        else {
            return false;
        };
        let Some(fence) = self.fence(claimant, batch, deadline).await else {
            return false;
        };
        let marked_at = match fence {
            BatchFence::Fenced => None,
            BatchFence::Marked(at) => Some(at),
        };
        let settled = self
            .resolved(deadline, || async {
                let _permits = (self.permit().await, self.store_permit().await);
                let now = self.clock().now();
                self.dispatcher
                    .store
                    .settle_batch(&r.device_id, &r.call_id, claimant, now, (batch, marked_at))
                    .await
            })
            .await;
        match settled {
            Ok(_) => {
                tracing::info!(
                    call_id = r.call_id.as_str(),
                    batch_marked = marked_at.is_some(),
                    "dispatch claim of a stopped run settled by its batch's fence"
                );
                true
            }
            Err(e) => {
                tracing::error!(error = %e, call_id = r.call_id.as_str(), "dispatch claim not settled");
                false
            }
        }
    }

    /// What fencing `claimant`'s batch due at `batch` found, asked once a run.
    async fn fence(
        &self,
        claimant: &RunToken,
        batch: DateTime<Utc>,
        deadline: DateTime<Utc>,
    ) -> Option<BatchFence> {
        let key = (claimant.clone(), batch);
        if let Some(found) = lock(&self.batches.fences).get(&key) {
            return Some(*found);
        }
        let fenced = self
            .resolved(deadline, || async {
                let _permits = (self.permit().await, self.store_permit().await);
                let now = self.clock().now();
                self.dispatcher
                    .store
                    .fence_batch(claimant, batch, now)
                    .await
            })
            .await
            .inspect_err(|e| tracing::error!(error = %e, "dispatch batch fence failed"))
            .ok()?;
        lock(&self.batches.fences).insert(key, fenced);
        Some(fenced)
    }
}

/// The batch of a push due at `at`: the tenth of a second it falls in (`plan::SLOT`), named by
/// its start. A second's pushes spread over its milliseconds take at most ten marks a run, and
/// each push leaves at most a tenth of a second after its batch's mark was asked for.
pub(super) fn batch_of(at: DateTime<Utc>) -> DateTime<Utc> {
    let len = SLOT.num_milliseconds();
    let ms = at.timestamp_millis().div_euclid(len) * len;
    DateTime::from_timestamp_millis(ms).unwrap_or(at)
}

/// `current` (the record a claim or a miss was refused on), if it is this call's claim made
/// before `abandoned_before` naming a batch, not yet settled.
pub(super) fn abandoned_in_batch<'a>(
    current: Option<&'a Reservation>,
    call: &DueCall,
    abandoned_before: DateTime<Utc>,
) -> Option<&'a Reservation> {
    current.filter(|c| {
        c.call_id == call.call_id
            && c.status == ReservationStatus::Claimed
            && c.mark_batch.is_some()
            && c.push_started_at.is_none()
            && c.claimed_at.is_some_and(|t| t < abandoned_before)
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
