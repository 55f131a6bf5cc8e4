//! A delivery's last step: recording its outcome (`sent`, `failed`, `missed`), retried on store
//! errors, and removing a token APNs called invalid; a bad outcome's notice (`notice`).

use super::run_state::Run;
use super::step_outcomes::{Again, Delivered};
use super::step_outcomes::{Missed, Pushed, Record, Recorded, TokenRemoval};
use super::timing::{FIRST_BACKOFF, wait_until};
use crate::domain::device::Device;
use crate::domain::due::DueCall;
use crate::push::PushError;
use crate::store::Outcome;

/// How long an outcome's write is retried (with backoff, from [`FIRST_BACKOFF`] doubling) after
/// a store error before it is left unrecorded. Well under half the claim timeout, and a call
/// left `claimed` after a started push is recorded `failed` by a later run, never pushed again.
pub const FINISH_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);

impl Run {
    /// Step 4: records `sent` or `failed` (a token APNs called invalid is removed first); for a
    /// device that confirms its calls, a push that left counts and the call is due again at the
    /// end of the confirmation wait (`pushes`: those before this one).
    pub(super) async fn record(
        &self,
        r: &DueCall,
        pushed: Pushed,
        pushes: u32,
        confirms: bool,
    ) -> (Record, Delivered) {
        let done = Delivered::Done(Again::No);
        let record = match pushed {
            Pushed::Sent { sent_at, .. } if confirms => {
                return self.record_pushed(r, sent_at, pushes).await;
            }
            Pushed::Sent {
                late_ms, attempts, ..
            } => {
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
            // No answer says whether it left, to a device that confirms its calls: its phone may
            // be ringing, so it counts as a push that left, and the call waits for its
            // confirmation as after any push (then pushed again, or `unconfirmed`), as a claim
            // abandoned after its mark does (`count_abandoned_push`): no `failed`, no notice.
            Pushed::NotSent {
                error: PushError::MaybeDelivered { reason },
                attempts,
                ..
            } if confirms => {
                tracing::warn!(
                    call_id = r.call_id.as_str(),
                    device = self.device_hash(r),
                    attempts,
                    reason = reason.as_str(),
                    "dispatch push state unknown: counted as left, waiting for its confirmation"
                );
                return self.record_pushed(r, self.clock().now(), pushes).await;
            }
            // No answer says whether it left: `failed`, never pushed again (a second push could
            // ring twice), counted as push state unknown (docs/reliability.md, "Push retries").
            Pushed::NotSent {
                error: PushError::MaybeDelivered { reason },
                attempts,
                device,
            } => {
                let reason = format!("push state unknown: {reason}");
                Record::PushUnknown(self.fail(r, None, attempts, &reason, Some(&device)).await)
            }
            Pushed::NotSent {
                error,
                attempts,
                device,
            } => {
                let token = match error {
                    PushError::InvalidToken { .. } => Some(self.remove_token(&device).await),
                    PushError::Retryable { .. }
                    | PushError::Rejected { .. }
                    | PushError::MaybeDelivered { .. } => None,
                };
                let recorded = self
                    .fail(r, error.status(), attempts, error.reason(), Some(&device))
                    .await;
                match token {
                    Some(token) => Record::DeadToken {
                        token: Some(token),
                        recorded,
                    },
                    None => Record::Failed(recorded),
                }
            }
            // Its record expired (an abandoned install): the app's state, as a dead token.
            Pushed::NoDevice => Record::DeadToken {
                token: None,
                recorded: self
                    .fail(r, None, 0, "the device is no longer registered", None)
                    .await,
            },
        };
        (record, done)
    }

    /// Removes a device whose token APNs called invalid, unless it has a newer token by now.
    async fn remove_token(&self, device: &Device) -> TokenRemoval {
        let _store = self.store_permit_after().await;
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

    pub(super) async fn fail(
        &self,
        r: &DueCall,
        status: Option<u16>,
        attempts: u32,
        reason: &str,
        device: Option<&Device>,
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
        if recorded == Recorded::Written {
            self.notice(r, "failed", device).await;
        }
        recorded
    }

    pub(super) async fn record_missed(&self, r: &DueCall) -> Missed {
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
            self.notice(r, "missed", None).await;
        }
        Missed(recorded)
    }

    /// Records the outcome on the reservation (`finish_reservation`, with this run's token),
    /// retrying store errors with backoff within [`FINISH_BUDGET`]: a call left `claimed` after
    /// its push would be recorded `failed` by a later run. An attempt made again after one whose
    /// reply was lost meets this run's own outcome and is answered as written.
    pub(super) async fn finish(&self, r: &DueCall, outcome: Outcome) -> Recorded {
        let deadline =
            self.clock().now() + chrono::Duration::from_std(FINISH_BUDGET).expect("small");
        let mut backoff = FIRST_BACKOFF;
        let mut retried = false;
        loop {
            let recorded = self.finish_once(r, outcome).await;
            let retry_at = self.clock().now() + backoff;
            if recorded != Recorded::StoreError || retry_at >= deadline {
                self.tally(|t| match recorded {
                    Recorded::StoreError => t.unresolved += 1,
                    _ if retried => t.resolved += 1,
                    _ => {}
                });
                return recorded;
            }
            retried = true;
            self.tally(|t| t.store_retries += 1);
            wait_until(self.clock(), retry_at).await;
            backoff = backoff * 2;
        }
    }

    async fn finish_once(&self, r: &DueCall, outcome: Outcome) -> Recorded {
        let _permits = (self.permit().await, self.store_permit_after().await);
        let now = self.clock().now();
        let result = self
            .dispatcher
            .store
            .finish_reservation(
                &r.device_id,
                &r.call_id,
                outcome,
                &self.token,
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
                self.tally(|t| t.store_throttles += u32::from(e.throttled));
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
