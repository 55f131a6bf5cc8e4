//! The delivery of one reservation: read its device, claim it, push, record the outcome.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::SemaphorePermit;

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

    /// Claim a moment before the second, push at the second, record the outcome.
    pub(super) async fn deliver(self: Arc<Self>, r: Reservation) {
        let at = r.scheduled_at.utc();
        // The token is read ahead of the claim, so that only the claim (one write) has to fit
        // in the claim lead, however many calls share the second.
        wait_until(self.clock(), at - self.claim_lead - DEVICE_READ_LEAD).await;
        let device = {
            let _permit = self.permit().await;
            match self.dispatcher.store.get_device(&r.device_id).await {
                Ok(device) => device,
                Err(e) => {
                    // Not claimed: still `scheduled`, so an overlapping or later run sends it.
                    self.tally(|t| t.store_errors += 1);
                    tracing::error!(error = %e, call_id = r.call_id.as_str(), "dispatch device read failed");
                    return;
                }
            }
        };
        wait_until(self.clock(), at - self.claim_lead).await;
        let claimed_at = {
            let _permit = self.permit().await;
            let now = self.clock().now();
            if at < now - self.grace {
                // Only if this run fell far behind: too late to ring.
                return self.miss(&r).await;
            }
            let claim = self
                .dispatcher
                .store
                .claim_reservation(&r.device_id, &r.call_id, now, now - self.claim_timeout)
                .await;
            match claim {
                Ok(true) => self.tally(|t| t.claimed += 1),
                Ok(false) => {
                    self.tally(|t| t.lost += 1);
                    tracing::info!(
                        call_id = r.call_id.as_str(),
                        device = self.device_hash(&r),
                        "dispatch claim refused (cancelled, or another run has it)"
                    );
                    return;
                }
                Err(e) => {
                    self.tally(|t| t.store_errors += 1);
                    tracing::error!(error = %e, call_id = r.call_id.as_str(), "dispatch claim failed");
                    return;
                }
            }
            now
        };

        wait_until(self.clock(), at).await;
        let _permit = self.permit().await;
        let start = self.clock().now();
        if start - claimed_at >= self.claim_timeout / 2 {
            // Another run may soon count this claim as abandoned and send it: leave it to that
            // run rather than risk two pushes.
            self.tally(|t| t.abandoned += 1);
            tracing::warn!(
                call_id = r.call_id.as_str(),
                held_ms = (start - claimed_at).num_milliseconds(),
                "dispatch claim held too long; left to a later run"
            );
            return;
        }
        let Some(device) = device else {
            self.fail(&r, None, 0, "the device is no longer registered")
                .await;
            return;
        };
        let (delivery, attempts) = self.push_within_budget(&r, &device, at, start).await;
        match delivery {
            Delivery::Sent(sent_at) => {
                let late_ms = (sent_at - at).num_milliseconds();
                // Counted as sent even if recording it fails: the push went out.
                self.tally(|t| {
                    t.sent += 1;
                    t.lateness_ms.push(late_ms);
                });
                self.finish(&r, Outcome::Sent).await;
                tracing::info!(
                    call_id = r.call_id.as_str(),
                    device = self.device_hash(&r),
                    outcome = "sent",
                    late_ms,
                    attempts,
                    "dispatch push"
                );
            }
            Delivery::NotSent(error) => {
                if let PushError::InvalidToken { .. } = error {
                    match self
                        .dispatcher
                        .store
                        .remove_device(&device.device_id, &device.voip_token)
                        .await
                    {
                        Ok(true) => self.tally(|t| t.tokens_removed += 1),
                        Ok(false) => {} // a newer token was registered meanwhile: keep it
                        Err(e) => {
                            self.tally(|t| t.store_errors += 1);
                            tracing::error!(error = %e, "dispatch could not remove an invalid token");
                        }
                    }
                }
                self.fail(&r, error.status(), attempts, error.reason())
                    .await;
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
            backoff = backoff * 2;
        }
    }

    async fn fail(&self, r: &Reservation, status: Option<u16>, attempts: u32, reason: &str) {
        if self.finish(r, Outcome::Failed).await {
            self.tally(|t| t.failed += 1);
        }
        tracing::warn!(
            call_id = r.call_id.as_str(),
            device = self.device_hash(r),
            outcome = "failed",
            status,
            reason,
            attempts,
            "dispatch push"
        );
    }

    pub(super) async fn miss(&self, r: &Reservation) {
        if self.finish(r, Outcome::Missed).await {
            self.tally(|t| t.missed += 1);
            let late_ms = (self.clock().now() - r.scheduled_at.utc()).num_milliseconds();
            tracing::warn!(
                call_id = r.call_id.as_str(),
                device = self.device_hash(r),
                outcome = "missed",
                late_ms,
                "dispatch push"
            );
        }
    }

    /// Records the outcome; `false` if the record had changed meanwhile or the write failed.
    async fn finish(&self, r: &Reservation, outcome: Outcome) -> bool {
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
            Ok(true) => true,
            Ok(false) => {
                tracing::warn!(
                    call_id = r.call_id.as_str(),
                    outcome = outcome.status().as_str(),
                    "dispatch outcome not recorded: the reservation changed meanwhile"
                );
                false
            }
            Err(e) => {
                self.tally(|t| t.store_errors += 1);
                tracing::error!(
                    error = %e,
                    call_id = r.call_id.as_str(),
                    outcome = outcome.status().as_str(),
                    "dispatch outcome not recorded (a later run may send it again)"
                );
                false
            }
        }
    }
}
