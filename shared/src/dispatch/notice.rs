//! The missed-call notice (docs/dispatch.md, "Missed-call notice"): after this run recorded a
//! call `failed`, `missed` or `unconfirmed`, one alert push to its device's `alertToken`, if it
//! registered one. Exactly once, as the call push: the notice is claimed with this run's token
//! (one conditional write, won again by this run after a lost reply, refused to any other), then
//! pushed, then `noticeSentAt` written, in a slot of the write plan. A claim that gets no answer
//! in time sends nothing.

use super::run_state::Run;
use super::timing::{FIRST_BACKOFF, wait_until};
use crate::domain::device::Device;
use crate::domain::due::DueCall;
use crate::push::{AlertPush, NOTICE_LIFETIME, Notice, PushError};

/// Attempts of a notice's push that APNs surely did not take (`PushError::Retryable`).
const NOTICE_ATTEMPTS: u32 = 3;
/// How long the notice's store requests (device read and claim) are made again when they get no
/// answer and its push is tried: the notice is claimed and pushed within this, its last
/// attempt cut at its end. A notice is worth less than the run's other calls, and keeps the
/// run inside its function's timeout (`crate::app::budgets`).
pub const NOTICE_BUDGET: std::time::Duration = std::time::Duration::from_secs(3);
/// How long the record of a notice sent (`noticeSentAt`, shown by GET /calls) is made again.
pub const NOTICE_RECORD_BUDGET: std::time::Duration = std::time::Duration::from_secs(1);
/// One attempt of the notice's push, at most (no answer by then: not sent, not tried again).
const NOTICE_PUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

impl Run {
    /// The notice of `r`, which this run recorded as `reason`. `known`: the device as this
    /// delivery read it (its VoIP token may have been removed since, as dead); otherwise it is
    /// read now.
    pub(super) async fn notice(&self, r: &DueCall, reason: &'static str, known: Option<&Device>) {
        let now = self.clock().now();
        if now >= r.scheduled_at.utc() + NOTICE_LIFETIME {
            return;
        }
        // Its writes in their planned slot (`plan`), so a second of failed pushes does not
        // overspend the table's throughput with its notices.
        let slot = self.dispatcher.plan.notice(r.due_at, now, self.parts);
        wait_until(self.clock(), slot).await;
        let now = self.clock().now();
        let budget = chrono::Duration::from_std(NOTICE_BUDGET).expect("small");
        let record_budget = chrono::Duration::from_std(NOTICE_RECORD_BUDGET).expect("small");
        let deadline = now + budget;
        let device = match known {
            Some(device) => Some(device.clone()),
            None => {
                let read = self
                    .resolved(deadline, || async {
                        let _permits = (self.permit().await, self.store_permit_after().await);
                        let now = self.clock().now();
                        self.dispatcher.store.get_device(&r.device_id, now).await
                    })
                    .await;
                match read {
                    Ok(device) => device,
                    Err(e) => {
                        tracing::error!(error = %e, call_id = r.call_id.as_str(), "missed-call notice not sent: the device could not be read");
                        self.tally(|t| t.notices_failed += 1);
                        return;
                    }
                }
            }
        };
        let Some((device, token)) =
            device.and_then(|d| d.alert_token.clone().map(|token| (d, token)))
        else {
            return;
        };
        let claimed = self
            .resolved(deadline, || async {
                let _permits = (self.permit().await, self.store_permit_after().await);
                let now = self.clock().now();
                self.dispatcher
                    .store
                    .claim_notice(&r.device_id, &r.call_id, &self.token, now)
                    .await
            })
            .await;
        match claimed {
            Ok(true) => {}
            Ok(false) => return, // another run's, or the call changed
            Err(e) => {
                tracing::error!(error = %e, call_id = r.call_id.as_str(), "missed-call notice not sent: its claim got no answer");
                self.tally(|t| t.notices_failed += 1);
                return;
            }
        }
        let push = AlertPush::for_call(r, reason);
        let mut attempts = 0;
        let mut backoff = FIRST_BACKOFF;
        let sent = loop {
            attempts += 1;
            let send = self.dispatcher.push.send_notice(Notice {
                push: &push,
                device: &device,
                token: &token,
            });
            let permit = self.permit().await;
            let left = (deadline - self.clock().now()).to_std().unwrap_or_default();
            let answer = tokio::time::timeout(NOTICE_PUSH_TIMEOUT.min(left), send)
                .await
                .unwrap_or_else(|_| {
                    Err(PushError::MaybeDelivered {
                        reason: "no answer in time".into(),
                    })
                });
            drop(permit);
            let retry_at = self.clock().now() + backoff;
            match answer {
                Err(PushError::Retryable { .. })
                    if attempts < NOTICE_ATTEMPTS && retry_at < deadline =>
                {
                    wait_until(self.clock(), retry_at).await;
                    backoff = backoff * 2;
                }
                answer => break answer,
            }
        };
        if let Err(error) = sent {
            self.tally(|t| t.notices_failed += 1);
            tracing::warn!(
                call_id = r.call_id.as_str(),
                device = self.device_hash(r),
                status = error.status(),
                reason = error.reason(),
                attempts,
                "missed-call notice not sent"
            );
            if matches!(error, PushError::InvalidToken { .. }) {
                let _permits = (self.permit().await, self.store_permit_after().await);
                let removed = self
                    .dispatcher
                    .store
                    .remove_alert_token(&device.device_id, &token)
                    .await;
                if let Err(e) = removed {
                    tracing::error!(error = %e, "dispatch could not remove an invalid alert token");
                }
            }
            return;
        }
        self.tally(|t| t.notices_sent += 1);
        let sent_at = self.clock().now();
        let recorded = self
            .resolved(sent_at + record_budget, || async {
                let _permits = (self.permit().await, self.store_permit_after().await);
                self.dispatcher
                    .store
                    .notice_sent(&r.device_id, &r.call_id, &self.token, sent_at)
                    .await
            })
            .await;
        if let Err(e) = recorded {
            tracing::error!(error = %e, call_id = r.call_id.as_str(), "missed-call notice sent but not recorded");
        }
        tracing::info!(
            call_id = r.call_id.as_str(),
            device = self.device_hash(r),
            reason,
            attempts,
            "missed-call notice sent"
        );
    }
}
