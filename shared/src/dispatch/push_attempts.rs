//! A push's attempts at APNs: retried with backoff within the push budget while the push surely
//! did not reach APNs, each started only while the claim is surely this run's (`may_push`).

use chrono::{DateTime, Utc};

use super::run_state::Run;
use super::timing::{ANSWER_WAIT, FIRST_BACKOFF, wait_until};
use crate::domain::device::Device;
use crate::domain::due::DueCall;
use crate::push::{PushError, VoipPush};
use tokio::time::Instant;

/// How long before the push budget's end a push must have left: room for the sender's "not
/// sent" to come back before the cut-off.
const LEAVE_MARGIN: chrono::Duration = chrono::Duration::milliseconds(50);

/// How a push attempt series ended.
pub(super) enum Delivery {
    /// Accepted by APNs at this time.
    Sent(DateTime<Utc>),
    NotSent(PushError),
    /// Not attempted (again): the claim might no longer be this run's, or the call is past
    /// grace ([`Run::may_push`]). Nothing left for it that may have been delivered.
    GivenUp,
}

impl Run {
    /// Pushes, retrying with backoff until `budget` after the later of the second and `start`.
    /// Only [`PushError::Retryable`] is retried: a push that surely did not reach APNs (429 or
    /// 5xx, refused before it was processed, never sent). One that may have been delivered
    /// ([`PushError::MaybeDelivered`]: the connection broke after the request was handed to it,
    /// no answer in time) is not, since the phone could ring twice; the call is then recorded
    /// `failed`, push state unknown (docs/reliability.md, "Push retries", weighs this against a
    /// call that never rings). Each attempt must leave by the deadline (`VoipPush::leave_by`)
    /// and is cut off once [`ANSWER_WAIT`] past it: unanswered by then, it may have been
    /// delivered. No attempt starts unless [`Run::may_push`].
    pub(super) async fn push_within_budget(
        &self,
        r: &DueCall,
        device: &Device,
        (at, claimed_at, start): (DateTime<Utc>, DateTime<Utc>, DateTime<Utc>),
        attempt: u32,
    ) -> (Delivery, u32) {
        let deadline = at.max(start) + self.push_budget;
        let mut backoff = FIRST_BACKOFF;
        let mut attempts = 0;
        loop {
            if !self.may_push(r, at, claimed_at) {
                return (Delivery::GivenUp, attempts);
            }
            attempts += 1;
            let now = self.clock().now();
            // The sender gives it back unsent if it cannot leave by then, a little before the
            // cut-off below, which could not tell a push that never left from one that did.
            let left = (deadline - now - LEAVE_MARGIN).to_std().unwrap_or_default();
            let push = VoipPush::for_call(r, now, attempt).leaving_by(Instant::now() + left);
            let answered_by = deadline + chrono::Duration::from_std(ANSWER_WAIT).expect("small");
            let result = tokio::select! {
                result = self.dispatcher.push.send(&push, device) => result,
                () = wait_until(self.clock(), answered_by) => Err(PushError::MaybeDelivered {
                    reason: "no answer within the push budget and the answer's wait".into(),
                }),
            };
            let error = match result {
                Ok(()) => return (Delivery::Sent(now), attempts),
                Err(error) => error,
            };
            self.tally(|t| t.apns_error(&error));
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
