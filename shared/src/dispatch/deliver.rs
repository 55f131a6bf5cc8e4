//! The delivery of one reservation: read its device, claim it, push, record the outcome.

use chrono::{DateTime, Utc};
use tokio::sync::SemaphorePermit;

use super::outcome::{
    Claim, Counted, DeviceRead, Missed, Push, Pushed, Record, Recorded, TokenRemoval,
};
use super::run::{Run, wait_until};
use crate::domain::device::Device;
use crate::domain::reservation::Reservation;
use crate::push::{PushError, VoipPush};
use crate::store::Outcome;

/// How long before the claim a reservation's device (its token) is read. A token replaced in
/// that moment is not used for this call; if the old one is rejected, the new one is kept (the
/// removal is conditional on the token).
pub(super) const DEVICE_READ_LEAD: chrono::Duration = chrono::Duration::milliseconds(1500);
/// First pause before retrying a push (then doubled, plus up to half of it at random).
const FIRST_BACKOFF: chrono::Duration = chrono::Duration::milliseconds(100);

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

    fn device_hash(&self, r: &Reservation) -> String {
        r.device_id.log_hash(&self.dispatcher.salt)
    }

    /// Delivers one reservation in four steps, each waiting for its moment: read the device,
    /// claim, push, record. Each step's outcome is counted into the report as soon as it is
    /// known; an outcome that ends the delivery ends it here.
    pub(super) async fn deliver(&self, r: &Reservation) {
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
    pub(super) async fn miss(&self, r: &Reservation) {
        self.counted(self.record_missed(r).await);
    }

    fn counted<O: Counted>(&self, outcome: O) -> O {
        self.tally(|t| outcome.count(t));
        outcome
    }

    /// Step 1, [`DEVICE_READ_LEAD`] before the claim. The token is read ahead of the claim, so
    /// that only the claim (one write) has to fit in the claim lead, however many calls share
    /// the second.
    async fn read_device(&self, r: &Reservation, at: DateTime<Utc>) -> DeviceRead {
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
    async fn claim(&self, r: &Reservation, at: DateTime<Utc>) -> Claim {
        wait_until(self.clock(), at - self.claim_lead).await;
        let _permit = self.permit().await;
        let now = self.clock().now();
        if at < now - self.grace {
            // Only if this run fell far behind: too late to ring.
            return Claim::TooLate(self.record_missed(r).await);
        }
        let claim = self
            .dispatcher
            .store
            .claim_reservation(&r.device_id, &r.call_id, now, now - self.claim_timeout)
            .await;
        match claim {
            Ok(true) => Claim::Won { claimed_at: now },
            Ok(false) => {
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

    /// Step 3, at the second: pushes (retrying within the push budget) unless the claim has
    /// become too old to push safely. The permit goes on with the outcome, to record it.
    async fn push(
        &self,
        r: &Reservation,
        at: DateTime<Utc>,
        claimed_at: DateTime<Utc>,
        device: Option<Device>,
    ) -> Push<'_> {
        wait_until(self.clock(), at).await;
        let permit = self.permit().await;
        let start = self.clock().now();
        if start - claimed_at >= self.claim_timeout / 2 {
            // Another run may soon count this claim as abandoned and send it: leave it to that
            // run rather than risk two pushes.
            tracing::warn!(
                call_id = r.call_id.as_str(),
                held_ms = (start - claimed_at).num_milliseconds(),
                "dispatch claim held too long; left to a later run"
            );
            return Push::Abandoned;
        }
        let Some(device) = device else {
            return Push::Ended(Pushed::NoDevice, permit);
        };
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

    /// Step 4: records `sent` or `failed`; a token APNs called invalid is removed first.
    async fn record(&self, r: &Reservation, pushed: Pushed) -> Record {
        match pushed {
            Pushed::Sent { late_ms, attempts } => {
                let recorded = self.finish(r, Outcome::Sent).await;
                tracing::info!(
                    call_id = r.call_id.as_str(),
                    device = self.device_hash(r),
                    outcome = "sent",
                    late_ms,
                    attempts,
                    "dispatch push"
                );
                Record::Sent(recorded)
            }
            Pushed::NotSent {
                error,
                attempts,
                device,
            } => {
                let token = match error {
                    PushError::InvalidToken { .. } => Some(self.remove_token(&device).await),
                    PushError::Retryable { .. } | PushError::Rejected { .. } => None,
                };
                let recorded = self.fail(r, error.status(), attempts, error.reason()).await;
                Record::Failed { token, recorded }
            }
            Pushed::NoDevice => Record::Failed {
                token: None,
                recorded: self
                    .fail(r, None, 0, "the device is no longer registered")
                    .await,
            },
        }
    }

    /// Removes a device whose token APNs called invalid, unless it has a newer token by now.
    async fn remove_token(&self, device: &Device) -> TokenRemoval {
        match self
            .dispatcher
            .store
            .remove_device(&device.device_id, &device.voip_token)
            .await
        {
            Ok(true) => TokenRemoval::Removed,
            Ok(false) => TokenRemoval::Kept,
            Err(e) => {
                tracing::error!(error = %e, "dispatch could not remove an invalid token");
                TokenRemoval::StoreError
            }
        }
    }

    /// Pushes, retrying what is worth retrying with backoff, until `budget` after the later of
    /// the second and `start`. Each attempt is cut off at that deadline too.
    async fn push_within_budget(
        &self,
        r: &Reservation,
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
            let push = VoipPush::for_reservation(r, now);
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

    async fn fail(
        &self,
        r: &Reservation,
        status: Option<u16>,
        attempts: u32,
        reason: &str,
    ) -> Recorded {
        let recorded = self.finish(r, Outcome::Failed).await;
        tracing::warn!(
            call_id = r.call_id.as_str(),
            device = self.device_hash(r),
            outcome = "failed",
            status,
            reason,
            attempts,
            "dispatch push"
        );
        recorded
    }

    async fn record_missed(&self, r: &Reservation) -> Missed {
        let recorded = self.finish(r, Outcome::Missed).await;
        if recorded == Recorded::Written {
            let late_ms = (self.clock().now() - r.scheduled_at.utc()).num_milliseconds();
            tracing::warn!(
                call_id = r.call_id.as_str(),
                device = self.device_hash(r),
                outcome = "missed",
                late_ms,
                "dispatch push"
            );
        }
        Missed(recorded)
    }

    /// Records the outcome on the reservation (`finish_reservation`).
    async fn finish(&self, r: &Reservation, outcome: Outcome) -> Recorded {
        let now = self.clock().now();
        let result = self
            .dispatcher
            .store
            .finish_reservation(
                &r.device_id,
                &r.call_id,
                outcome,
                now,
                now - self.claim_timeout,
            )
            .await;
        match result {
            Ok(true) => Recorded::Written,
            Ok(false) => {
                tracing::warn!(
                    call_id = r.call_id.as_str(),
                    outcome = outcome.status().as_str(),
                    "dispatch outcome not recorded: the reservation changed meanwhile"
                );
                Recorded::Changed
            }
            Err(e) => {
                tracing::error!(
                    error = %e,
                    call_id = r.call_id.as_str(),
                    outcome = outcome.status().as_str(),
                    "dispatch outcome not recorded (a later run may send it again)"
                );
                Recorded::StoreError
            }
        }
    }
}
