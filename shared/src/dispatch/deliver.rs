//! The delivery of one reservation: read its device, claim it, push, record the outcome.

use chrono::{DateTime, Utc};
use tokio::sync::SemaphorePermit;

use super::outcome::{Claim, Counted, DeviceRead, Push, Pushed, Record, Recorded};
use super::run::{Run, wait_until};
use crate::domain::device::Device;
use crate::domain::due::DueCall;
use crate::domain::reservation::{Reservation, ReservationStatus};
use crate::push::{PushError, VoipPush};
use crate::store::ClaimAnswer;

/// How long before the claim a reservation's device (its token) is read. A token replaced in
/// that moment is not used for this call; if the old one is rejected, the new one is kept (the
/// removal is conditional on the token).
pub(super) const DEVICE_READ_LEAD: chrono::Duration = chrono::Duration::milliseconds(1500);
/// First pause before retrying a push (then doubled, plus up to half of it at random).
pub(super) const FIRST_BACKOFF: chrono::Duration = chrono::Duration::milliseconds(100);
/// How long before its second a claimed call's push is marked as started
/// (`Store::mark_push_started`): the one write between claim and push, made ahead so that it
/// does not delay the push.
pub(super) const MARK_LEAD: chrono::Duration = chrono::Duration::milliseconds(200);

/// How a push attempt series ended.
enum Delivery {
    /// Accepted by APNs at this time.
    Sent(DateTime<Utc>),
    NotSent(PushError),
}

impl Run {
    async fn permit(&self) -> SemaphorePermit<'_> {
        self.limit
            .acquire()
            .await
            .expect("the semaphore is never closed")
    }

    pub(super) fn device_hash(&self, r: &DueCall) -> String {
        r.device_id.log_hash(&self.dispatcher.salt)
    }

    /// Delivers one reservation in four steps, each waiting for its moment: read the device,
    /// claim, push, record. Each step's outcome is counted into the report as soon as it is
    /// known; an outcome that ends the delivery ends it here.
    pub(super) async fn deliver(&self, r: &DueCall) {
        let at = r.scheduled_at.utc();
        let DeviceRead::Read(device) = self.counted(self.read_device(r, at).await) else {
            return;
        };
        let Claim::Won { claimed_at } = self.counted(self.claim(r, at).await) else {
            return;
        };
        let Push::Ended(pushed, _permit) = self.counted(self.push(r, at, claimed_at, device).await)
        else {
            return;
        };
        // Still under the push's permit.
        self.counted(self.record(r, pushed).await);
    }

    /// A reservation already beyond grace when its task starts: marked `missed`, no push.
    pub(super) async fn miss(&self, r: &DueCall) {
        let missed = self.record_missed(r).await;
        if missed.0 == Recorded::Changed {
            // Refused: a claim abandoned after its push started is not missed but failed.
            let now = self.clock().now();
            if let Ok(current) = self
                .dispatcher
                .store
                .get_reservation(&r.device_id, now)
                .await
                && started_then_abandoned(current.as_ref(), r, now - self.claim_timeout)
            {
                self.counted(self.push_state_unknown(r).await);
                return;
            }
        }
        self.counted(missed);
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
            )
            .await;
        Record::Failed {
            token: None,
            recorded,
        }
    }

    fn counted<O: Counted>(&self, outcome: O) -> O {
        self.tally(|t| outcome.count(t));
        outcome
    }

    /// Step 1, [`DEVICE_READ_LEAD`] before the claim. The token is read ahead of the claim, so
    /// that only the claim (one write) has to fit in the claim lead, however many calls share
    /// the second.
    async fn read_device(&self, r: &DueCall, at: DateTime<Utc>) -> DeviceRead {
        wait_until(self.clock(), at - self.claim_lead - DEVICE_READ_LEAD).await;
        let _permit = self.permit().await;
        match self.dispatcher.store.get_device(&r.device_id).await {
            Ok(device) => DeviceRead::Read(device),
            Err(e) => {
                tracing::error!(error = %e, call_id = r.call_id.as_str(), "dispatch device read failed");
                DeviceRead::StoreError
            }
        }
    }

    /// Step 2, `claim_lead` before the second: one conditional write, `scheduled` (or an
    /// abandoned claim) → `claimed`.
    async fn claim(&self, r: &DueCall, at: DateTime<Utc>) -> Claim {
        wait_until(self.clock(), at - self.claim_lead).await;
        let _permit = self.permit().await;
        let now = self.clock().now();
        if at < now - self.grace {
            // Only if this run fell far behind: too late to ring.
            return Claim::TooLate(self.record_missed(r).await);
        }
        let abandoned_before = now - self.claim_timeout;
        let claim = self
            .dispatcher
            .store
            .claim_due(&r.device_id, &r.call_id, now, abandoned_before)
            .await;
        match claim {
            Ok(ClaimAnswer::Won) => Claim::Won { claimed_at: now },
            Ok(ClaimAnswer::Refused(current))
                if started_then_abandoned(current.as_ref(), r, abandoned_before) =>
            {
                Claim::PushUnknown(self.push_state_unknown(r).await)
            }
            Ok(ClaimAnswer::Refused(_)) => {
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

    /// Step 3: [`MARK_LEAD`] before the second, marks the push as started (unless the claim
    /// has become too old to push safely), then at the second pushes, retrying within the push
    /// budget. Only a marked claim pushes, and a marked claim is never taken over: a run that
    /// dies after the mark leaves the call to be recorded `failed`, never pushed twice. The
    /// permit goes on with the outcome, to record it.
    async fn push(
        &self,
        r: &DueCall,
        at: DateTime<Utc>,
        claimed_at: DateTime<Utc>,
        device: Option<Device>,
    ) -> Push<'_> {
        wait_until(self.clock(), at - MARK_LEAD).await;
        let permit = self.permit().await;
        let now = self.clock().now();
        if now - claimed_at >= self.claim_timeout / 2 {
            // Another run may soon count this claim as abandoned and send it: leave it to that
            // run rather than risk two pushes.
            tracing::warn!(
                call_id = r.call_id.as_str(),
                held_ms = (now - claimed_at).num_milliseconds(),
                "dispatch claim held too long; left to a later run"
            );
            return Push::Abandoned;
        }
        let Some(device) = device else {
            return Push::Ended(Pushed::NoDevice, permit);
        };
        let marked = self
            .dispatcher
            .store
            .mark_push_started(&r.device_id, &r.call_id, claimed_at, now)
            .await;
        match marked {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(
                    call_id = r.call_id.as_str(),
                    "dispatch push not started: the claim is no longer this run's"
                );
                return Push::Unmarked { store_error: false };
            }
            Err(e) => {
                // Not pushed: the claim is left to a later run (which pushes it, within grace,
                // unless the mark was written after all, when it records the call `failed`).
                tracing::error!(error = %e, call_id = r.call_id.as_str(), "dispatch push mark failed");
                return Push::Unmarked { store_error: true };
            }
        }
        drop(permit);
        wait_until(self.clock(), at).await;
        let permit = self.permit().await;
        let start = self.clock().now();
        let (delivery, attempts) = self.push_within_budget(r, &device, at, start).await;
        let pushed = match delivery {
            Delivery::Sent(sent_at) => Pushed::Sent {
                late_ms: (sent_at - at).num_milliseconds(),
                attempts,
            },
            Delivery::NotSent(error) => Pushed::NotSent {
                error,
                attempts,
                device,
            },
        };
        Push::Ended(pushed, permit)
    }

    /// Pushes, retrying what is worth retrying with backoff, until `budget` after the later of
    /// the second and `start`. Each attempt is cut off at that deadline too.
    async fn push_within_budget(
        &self,
        r: &DueCall,
        device: &Device,
        at: DateTime<Utc>,
        start: DateTime<Utc>,
    ) -> (Delivery, u32) {
        let deadline = at.max(start) + self.push_budget;
        let mut backoff = FIRST_BACKOFF;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let now = self.clock().now();
            let push = VoipPush::for_call(r, now);
            let result = tokio::select! {
                result = self.dispatcher.push.send(&push, device) => result,
                () = wait_until(self.clock(), deadline) => Err(PushError::Retryable {
                    status: None,
                    reason: "no answer within the push budget".into(),
                }),
            };
            let error = match result {
                Ok(()) => return (Delivery::Sent(now), attempts),
                Err(error) => error,
            };
            let jitter =
                chrono::Duration::milliseconds(fastrand::i64(0..=backoff.num_milliseconds() / 2));
            let retry_at = self.clock().now() + backoff + jitter;
            if !matches!(error, PushError::Retryable { .. }) || retry_at >= deadline {
                return (Delivery::NotSent(error), attempts);
            }
            tracing::info!(
                call_id = r.call_id.as_str(),
                status = error.status(),
                reason = error.reason(),
                attempts,
                "dispatch push retried"
            );
            wait_until(self.clock(), retry_at).await;
            if self.clock().now() >= deadline {
                // Woken late (a busy runtime): no attempt starts past the budget.
                return (Delivery::NotSent(error), attempts);
            }
            backoff = backoff * 2;
        }
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
