//! The delivery of one reservation: read its device, claim it, mark and push, record the outcome.
//! A store request that gets no answer is made again by this run (its token makes each write
//! idempotent) until it is answered or [`RESOLVE_BUDGET`](super::timing::RESOLVE_BUDGET) runs
//! out: a slow or lossy DynamoDB makes a call late, not lost.

use chrono::{DateTime, Utc};

use super::batch::{abandoned_in_batch, batch_of};
use super::notice::released_notice;
use super::plan::Slots;
use super::push_attempts::Delivery;
use super::run_state::Run;
use super::step_outcomes::{Again, Claim, Delivered, DeviceRead, Push, Pushed, Record};
use super::timing::{Resolved, until_resolved, wait_until};
use crate::domain::device::Device;
use crate::domain::due::DueCall;
use crate::domain::reservation::{Reservation, ReservationStatus};
use crate::push::PushError;
use crate::store::{ClaimAnswer, ClaimMark, StoreError};

/// How long past the other steps' deadline a claim is still given back (`Run::give_back`), at
/// most: a run stays inside its function's timeout (`budgets.rs`).
pub const GIVE_BACK: chrono::Duration = chrono::Duration::seconds(5);

impl Run {
    /// Delivers one push of a reservation in four steps, each waiting for its moment: read the
    /// device, claim, push, record. Each step's outcome is counted into the report as soon as it
    /// is known; an outcome that ends the delivery ends it here, saying whether the call is left
    /// for a later selection, or when it is due again (a device that confirms its calls and has
    /// not yet: `confirming.rs`).
    pub(super) async fn deliver_once(&self, r: &DueCall, slots: Slots) -> Delivered {
        let at = r.due_at;
        let device = match self.counted(self.read_device(r, at, slots.claim_at).await) {
            DeviceRead::Read(device) => device,
            DeviceRead::StoreError => return Delivered::Done(Again::Later),
        };
        let confirms = device.as_ref().is_some_and(|d| d.confirms_calls);
        let mark = claim_mark(device.as_ref(), at);
        let claiming = self.claim(r, at, (slots.claim_at, mark)).await;
        let (claimed_at, pushes) = match self.counted(claiming) {
            Claim::Won { claimed_at, pushes } => (claimed_at, pushes),
            // Refused: cancelled, or another run has it (which may yet die and leave it).
            Claim::StoreError | Claim::Lost => {
                return Delivered::Done(Again::Later);
            }
            Claim::TooLate(_) | Claim::PushUnknown(_) => return Delivered::Done(Again::No),
            Claim::PushedBefore(due) => return due,
            // Ended, its notice released for this run: the notice alone, never a call push.
            Claim::ReleasedNotice(reason) => {
                self.released(r, reason, device.as_ref()).await;
                return Delivered::Done(Again::No);
            }
        };
        if pushes > 0 && !self.may_push_again(r, pushes) {
            self.counted(self.record_unconfirmed(r).await);
            return Delivered::Done(Again::No);
        }
        // A mark of its own is planned now that the device is known; a batch's is made at the
        // second.
        let mark_at = match mark {
            ClaimMark::Apart if device.is_some() => self.mark_slot(r),
            _ => at,
        };
        let marking = (claimed_at, mark_at, mark);
        let pushed = match self.counted(self.push(r, at, marking, device, pushes, confirms).await) {
            Push::Ended(pushed) => pushed,
            Push::GivenBack(_) | Push::Unmarked => return Delivered::Done(Again::Later),
        };
        // The outcome waits for its planned slot (a crowded second's: `plan`); each of its
        // writes, and its notice's, takes a permit of its own. Not for a device that confirms
        // its calls: its confirmation waits for the outcome.
        if !confirms {
            wait_until(self.clock(), slots.finish_at).await;
        }
        let (record, due) = self.record(r, pushed, pushes, confirms).await;
        self.counted(record);
        due
    }

    /// A reservation already beyond grace when its task starts: marked `missed`, no push. A
    /// claim a stopped run left naming its batch is settled first (`batch.rs`).
    pub(super) async fn miss(&self, r: &DueCall) {
        let mut settled = false;
        loop {
            let missed = self.record_missed(r).await;
            if missed.0 != super::step_outcomes::Recorded::Changed {
                self.counted(missed);
                return;
            }
            // Refused: a claim abandoned after its push started is not missed but failed; a
            // call whose push left (its device confirms its calls) ends unconfirmed.
            let now = self.clock().now();
            let Ok(current) = self
                .dispatcher
                .store
                .get_reservation(&r.device_id, now)
                .await
            else {
                self.counted(missed);
                return;
            };
            let abandoned_before = now - self.claim_timeout;
            if !settled
                && let Some(c) = abandoned_in_batch(current.as_ref(), r, abandoned_before)
                && self.settle_abandoned(r, c, now + GIVE_BACK).await
            {
                settled = true;
                continue;
            }
            // Found by a run fallen behind: its notice released for a later run, sent alone.
            if let Some(reason) = released_notice(current.as_ref(), r) {
                self.released(r, reason, None).await;
                return;
            }
            let abandoned = started_then_abandoned(current.as_ref(), r, abandoned_before);
            if current.as_ref().is_some_and(|c| {
                c.call_id == r.call_id
                    && ((c.status == ReservationStatus::Scheduled && c.pushes > 0)
                        || (abandoned && c.confirms))
            }) {
                self.counted(self.record_unconfirmed(r).await);
                return;
            }
            if abandoned {
                self.counted(self.push_state_unknown(r).await);
                return;
            }
            self.counted(missed);
            return;
        }
    }

    /// A claim abandoned after its push started (its run died or lost the store while pushing):
    /// the push may or may not have left, so it is recorded `failed`, never pushed again.
    pub(super) async fn push_state_unknown(&self, r: &DueCall) -> Record {
        let recorded = self
            .fail(
                r,
                None,
                0,
                "push state unknown: the run that started the push stopped before recording it",
                None,
            )
            .await;
        Record::PushUnknown(recorded)
    }

    /// Makes the store request `request` until it is answered (see `timing::until_resolved`),
    /// counting it as resolved if that took more than one attempt.
    pub(super) async fn resolved<T, F, Fut>(
        &self,
        deadline: DateTime<Utc>,
        request: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let Resolved {
            answer,
            retries,
            throttles,
        } = until_resolved(self.clock(), deadline, request).await;
        self.tally(|t| {
            t.store_retries += retries;
            t.store_throttles += throttles;
            match &answer {
                Ok(_) if retries > 0 => t.resolved += 1,
                Ok(_) => {}
                Err(_) => t.unresolved += 1,
            }
        });
        answer
    }

    /// Step 1, `DEVICE_READ_LEAD` before the claim (planned at `claim_at`). The token is read
    /// ahead of the claim, so that only the claim (one write) has to fit in its slot.
    async fn read_device(
        &self,
        r: &DueCall,
        at: DateTime<Utc>,
        claim_at: DateTime<Utc>,
    ) -> DeviceRead {
        let start = claim_at - super::timing::DEVICE_READ_LEAD;
        wait_until(self.clock(), start).await;
        let read = self
            .resolved(self.resolve_deadline(at), || async {
                let _permits = (self.permit().await, self.store_permit().await);
                let now = self.clock().now();
                self.dispatcher.store.get_device(&r.device_id, now).await
            })
            .await;
        match read {
            Ok(device) => DeviceRead::Read(device),
            Err(e) => {
                tracing::error!(error = %e, call_id = r.call_id.as_str(), "dispatch device read failed");
                DeviceRead::StoreError
            }
        }
    }

    /// Step 2, at `claim_at` (`claim_lead` before the second, or earlier in a crowded one:
    /// `plan`): one conditional write, `scheduled` (or an abandoned claim) → `claimed` by this
    /// run, naming its batch when `mark` says so (a device that does not confirm its calls:
    /// `claim_mark`). Made again until answered: a claim whose reply was lost is found to be
    /// this run's own. A claim a stopped run left naming its batch is settled first
    /// (`batch.rs`), then claimed again.
    async fn claim(
        &self,
        r: &DueCall,
        at: DateTime<Utc>,
        (claim_at, mark): (DateTime<Utc>, ClaimMark),
    ) -> Claim {
        wait_until(self.clock(), claim_at).await;
        let claimed_at = self.clock().now();
        if r.due_at == r.scheduled_at.utc() && at < claimed_at - self.grace {
            // Only if this run fell far behind: too late to ring.
            return Claim::TooLate(self.record_missed(r).await);
        }
        let (mut answer, mut claimed_at) = self.claim_request(r, at, mark).await;
        if let Ok((ClaimAnswer::Refused(current), abandoned_before)) = &answer
            && let Some(c) = abandoned_in_batch(current.as_deref(), r, *abandoned_before)
            && self.settle_abandoned(r, c, self.resolve_deadline(at)).await
        {
            (answer, claimed_at) = self.claim_request(r, at, mark).await;
        }
        match answer {
            Ok((ClaimAnswer::Won { pushes }, _)) => Claim::Won { claimed_at, pushes },
            Ok((ClaimAnswer::Refused(current), abandoned_before))
                if started_then_abandoned(current.as_deref(), r, abandoned_before) =>
            {
                match current.filter(|c| c.confirms) {
                    // Its device confirms its calls: the push counts, and the call goes again.
                    Some(c) => Claim::PushedBefore(self.count_abandoned_push(r, c.pushes).await),
                    None => Claim::PushUnknown(self.push_state_unknown(r).await),
                }
            }
            Ok((ClaimAnswer::Refused(current), _)) => {
                if let Some(reason) = released_notice(current.as_deref(), r) {
                    return Claim::ReleasedNotice(reason);
                }
                tracing::info!(
                    call_id = r.call_id.as_str(),
                    device = self.device_hash(r),
                    "dispatch claim refused (cancelled, or another run has it)"
                );
                Claim::Lost
            }
            Err(e) => {
                tracing::error!(error = %e, call_id = r.call_id.as_str(), "dispatch claim failed");
                Claim::StoreError
            }
        }
    }

    /// The claim's write, made again until answered: its answer (with the `abandoned_before`
    /// it was made with) and when its last attempt was made.
    async fn claim_request(
        &self,
        r: &DueCall,
        at: DateTime<Utc>,
        mark: ClaimMark,
    ) -> (
        Result<(ClaimAnswer, DateTime<Utc>), StoreError>,
        DateTime<Utc>,
    ) {
        let mut claimed_at = self.clock().now();
        let answer = self
            .resolved(self.resolve_deadline(at), || {
                let now = self.clock().now();
                claimed_at = now;
                async move {
                    let _permits = (self.permit().await, self.store_permit().await);
                    let abandoned_before = now - self.claim_timeout;
                    let answer = self
                        .dispatcher
                        .store
                        .claim_due(
                            &r.device_id,
                            &r.call_id,
                            &self.token,
                            now,
                            abandoned_before,
                            mark,
                        )
                        .await?;
                    Ok((answer, abandoned_before))
                }
            })
            .await;
        (answer, claimed_at)
    }

    /// Step 3: at `mark_at` marks the push as started: a claim made [`ClaimMark::Apart`] with
    /// a write of its own (`MARK_LEAD` before the second, or earlier in a crowded one:
    /// `plan`), one made [`ClaimMark::InBatch`] with its batch's mark, at the second
    /// (`batch.rs`). Then at the second (or as soon as the mark is answered, if that is later)
    /// pushes, retrying within the push budget. Only a marked claim pushes,
    /// and a marked claim is never taken over: a run that dies after the mark leaves the call
    /// to be recorded `failed`, never pushed twice. A claim
    /// held so long that another run could take it over is given back unpushed instead, also
    /// when that happens while the push waits for its permit or between its attempts
    /// ([`Run::may_push`]).
    async fn push(
        &self,
        r: &DueCall,
        at: DateTime<Utc>,
        (claimed_at, mark_at, mark): (DateTime<Utc>, DateTime<Utc>, ClaimMark),
        device: Option<Device>,
        pushes: u32,
        confirms: bool,
    ) -> Push {
        wait_until(self.clock(), mark_at).await;
        let Some(device) = device else {
            return Push::Ended(Pushed::NoDevice);
        };
        // Past half the claim timeout another run may soon count the claim as abandoned.
        let safe_until = claimed_at + self.claim_timeout / 2;
        let marked = match mark {
            // One write for the run's pushes of this second, right before they leave.
            ClaimMark::InBatch(batch) => {
                let deadline = self.resolve_deadline(at).min(safe_until);
                self.batch_marked(batch, deadline)
                    .await
                    .ok_or_else(|| StoreError::new("the batch mark got no answer in time"))
            }
            ClaimMark::Apart => {
                self.resolved(self.resolve_deadline(at).min(safe_until), || async {
                    let _permits = (self.permit().await, self.store_permit().await);
                    let now = self.clock().now();
                    self.dispatcher
                        .store
                        .mark_push_started(&r.device_id, &r.call_id, &self.token, now, confirms)
                        .await
                })
                .await
            }
        };
        match marked {
            Ok(true) if self.clock().now() < safe_until => {}
            Ok(true) => {
                tracing::warn!(
                    call_id = r.call_id.as_str(),
                    held_ms = (self.clock().now() - claimed_at).num_milliseconds(),
                    "dispatch claim held too long to push; given back"
                );
                return Push::GivenBack(self.give_back(r, claimed_at).await);
            }
            Ok(false) => {
                tracing::warn!(
                    call_id = r.call_id.as_str(),
                    "dispatch push not started: the claim is no longer this run's"
                );
                return Push::Unmarked;
            }
            Err(e) => {
                // Not pushed, and this run knows it: the claim is given back for a later
                // selection to send (or, failing that, left to a later run).
                tracing::error!(error = %e, call_id = r.call_id.as_str(), "dispatch push mark failed");
                return Push::GivenBack(self.give_back(r, claimed_at).await);
            }
        }
        wait_until(self.clock(), at).await;
        let permit = self.permit().await;
        let start = self.clock().now();
        let (delivery, attempts) = self
            .push_within_budget(r, &device, (at, claimed_at, start), pushes + 1)
            .await;
        // Its own permit first: giving back takes one, and there may be only one.
        drop(permit);
        let pushed = match delivery {
            Delivery::GivenUp => {
                tracing::warn!(
                    call_id = r.call_id.as_str(),
                    held_ms = (self.clock().now() - claimed_at).num_milliseconds(),
                    attempts,
                    "dispatch push not started while the claim was surely this run's; given back"
                );
                return Push::GivenBack(self.give_back(r, claimed_at).await);
            }
            // Never left (no connection or stream in time, refused, above a GOAWAY's last
            // stream id) through the whole budget: not `failed`, which says it may have left or
            // APNs refused it. Given back, so a later run (this one knows it and leaves it)
            // sends it within grace, or records it `missed`: at most one more try a minute.
            Delivery::NotSent(PushError::Retryable {
                status: None,
                reason,
            }) => {
                tracing::warn!(
                    call_id = r.call_id.as_str(),
                    attempts,
                    reason = reason.as_str(),
                    "dispatch push never left within its budget; given back"
                );
                return Push::GivenBack(self.give_back(r, claimed_at).await);
            }
            Delivery::Sent(sent_at) => Pushed::Sent {
                late_ms: (sent_at - at).num_milliseconds(),
                attempts,
                sent_at,
                again: pushes > 0,
            },
            Delivery::NotSent(error) => Pushed::NotSent {
                error,
                attempts,
                device,
            },
        };
        Push::Ended(pushed)
    }

    /// Whether this run may still start a push of its claim made at `claimed_at` on the call
    /// due at `at`: checked right before each attempt, once its permit is held, since waiting
    /// for the permit (a crowded second, `concurrency`) or between attempts can take any time.
    /// Until half the claim timeout after the claim, as for the mark: the attempt (cut off at
    /// the push budget, under the shortest timeout's half) ends before any other run counts
    /// the claim abandoned and records the call `failed`, so a push never leaves once the
    /// claim may be someone else's. And not past grace (never before the push budget has
    /// passed: that is how late any push may leave): too late to ring.
    ///
    /// A call given up here is given back (`claimed` → `scheduled`, mark removed), not
    /// recorded: this run knows its push did not leave, so `failed` would be wrong (SPEC), and
    /// `scheduled` again a later run sends it within grace, once (or records it `missed`). If
    /// another run has recorded it `failed` meanwhile (push state unknown), the give-back is
    /// refused and the call stays so: never pushed twice, its loss on record.
    pub(super) fn may_push(
        &self,
        r: &DueCall,
        at: DateTime<Utc>,
        claimed_at: DateTime<Utc>,
    ) -> bool {
        let now = self.clock().now();
        // Grace runs from the reserved second; a push again is due inside it (`due_at`).
        let last = (r.scheduled_at.utc() + self.grace).max(at + self.push_budget);
        now < claimed_at + self.claim_timeout / 2 && now <= last
    }

    /// Gives back this run's claim of a call it did not push (`Store::release_claim`), made
    /// again until answered while the claim is still surely this run's. Whether it is now
    /// `scheduled` again (a later selection sends it); if not, a later run finds the claim.
    async fn give_back(&self, r: &DueCall, claimed_at: DateTime<Utc>) -> Result<bool, StoreError> {
        let at = r.scheduled_at.utc();
        let deadline =
            (claimed_at + self.claim_timeout * 3 / 4).min(self.resolve_deadline(at) + GIVE_BACK);
        self.resolved(deadline, || async {
            let _permits = (self.permit().await, self.store_permit().await);
            let now = self.clock().now();
            self.dispatcher
                .store
                .release_claim(&r.device_id, &r.call_id, &self.token, now)
                .await
        })
        .await
        .inspect_err(|e| {
            tracing::error!(error = %e, call_id = r.call_id.as_str(), "dispatch claim not given back");
        })
    }
}

/// How a call to `device` due at `at` is claimed: in the batch of this run's pushes of that
/// tenth of a second (`batch_of`), whose one mark is written when the first is due, right
/// before it leaves, so that a run
/// that dies before it leaves claims the next run settles and sends, however early they were
/// made. Apart (a mark of its own) for a device that confirms its calls (a confirmation
/// refuses a push again's mark, so that mark is the call's own) or no device to push to.
fn claim_mark(device: Option<&Device>, at: DateTime<Utc>) -> ClaimMark {
    match device {
        Some(d) if !d.confirms_calls => ClaimMark::InBatch(batch_of(at)),
        _ => ClaimMark::Apart,
    }
}

/// Whether `current` (the record a claim or a miss was refused on) is this call's claim,
/// abandoned (made before `abandoned_before`) after its push had started.
pub(super) fn started_then_abandoned(
    current: Option<&Reservation>,
    call: &DueCall,
    abandoned_before: DateTime<Utc>,
) -> bool {
    current.is_some_and(|c| {
        c.call_id == call.call_id
            && c.status == ReservationStatus::Claimed
            && c.push_started_at.is_some()
            && c.claimed_at.is_some_and(|t| t < abandoned_before)
    })
}
