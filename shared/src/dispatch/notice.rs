//! The missed-call notice (docs/dispatch.md, "Missed-call notice"): after this run recorded a
//! call `failed`, `missed` or `unconfirmed`, one alert push to its device's `alertToken`, if it
//! registered one. Exactly once, as the call push: the notice is claimed with this run's token
//! (one conditional write, won again by this run after a lost reply, refused to any other), then
//! pushed, then `noticeSentAt` written, in a slot of the write plan. A claim that gets no answer
//! in time sends nothing. A notice whose every attempt surely failed (APNs did not take it) is
//! released for the next minute's run while that run still selects the call's minute (its
//! look-back): the call is back in its index entry, and the run that selects it finds its claim
//! refused on the released notice and sends the notice alone.

use chrono::{DateTime, Utc};

use super::run::MISSED_LOOKBACK;
use super::run_state::Run;
use super::timing::{FIRST_BACKOFF, wait_until};
use crate::domain::device::Device;
use crate::domain::due::DueCall;
use crate::domain::reservation::{Reservation, ReservationStatus};
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
/// How late after a released notice's retry time the run that takes it on may start: a run a
/// minute, so the next one or the one after it. A notice is released only while a run started
/// that late still selects its call's minute, so none is left in the index after the look-back.
const RETRY_SLACK: chrono::Duration = chrono::Duration::minutes(1);

/// The notice a run sends alone for `r`, whose claim was refused on `current`: `r`'s call,
/// ended `failed`, `missed` or `unconfirmed`, its notice released for a later run and not sent.
/// Its reason, from the status.
pub(super) fn released_notice(current: Option<&Reservation>, r: &DueCall) -> Option<&'static str> {
    let c = current
        .filter(|c| c.call_id == r.call_id && c.notice_retry && c.notice_sent_at.is_none())?;
    match c.status {
        ReservationStatus::Failed => Some("failed"),
        ReservationStatus::Missed => Some("missed"),
        ReservationStatus::Unconfirmed => Some("unconfirmed"),
        _ => None,
    }
}

impl Run {
    /// The notice of `r`, which this run recorded as `reason`. `known`: the device as this
    /// delivery read it (its VoIP token may have been removed since, as dead); otherwise it is
    /// read now.
    pub(super) async fn notice(&self, r: &DueCall, reason: &'static str, known: Option<&Device>) {
        self.send_notice(r, reason, known, false).await;
    }

    /// The notice of `r` released by an earlier run ([`released_notice`]), sent alone. One
    /// that can no longer be sent (past [`NOTICE_LIFETIME`], no device or alert token) is
    /// claimed without a push, which takes it out of the index.
    pub(super) async fn released(&self, r: &DueCall, reason: &'static str, known: Option<&Device>) {
        self.send_notice(r, reason, known, true).await;
    }

    async fn send_notice(
        &self,
        r: &DueCall,
        reason: &'static str,
        known: Option<&Device>,
        released: bool,
    ) {
        let now = self.clock().now();
        let expired = now >= r.scheduled_at.utc() + NOTICE_LIFETIME;
        if expired && !released {
            return;
        }
        // Its writes in their planned slot (`plan`), so a second of failed pushes does not
        // overspend the table's throughput with its notices: the claim, then the record or
        // the release (a released notice's drop is its claim alone).
        let slot = self.dispatcher.plan.notice(r.due_at, now, self.parts);
        wait_until(self.clock(), slot).await;
        let now = self.clock().now();
        let budget = chrono::Duration::from_std(NOTICE_BUDGET).expect("small");
        let record_budget = chrono::Duration::from_std(NOTICE_RECORD_BUDGET).expect("small");
        let deadline = now + budget;
        if expired {
            self.drop_notice(r, deadline).await;
            return;
        }
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
            if released {
                self.drop_notice(r, deadline).await;
            }
            return;
        };
        let claimed = self.claim_notice(r, deadline).await;
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
            // Every attempt surely failed (APNs did not take it): a later run tries again.
            if matches!(error, PushError::Retryable { .. }) {
                self.release_notice(r, self.clock().now() + record_budget)
                    .await;
            }
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

    /// Gives this run's claim of `r`'s notice back for the next minute's run, due when this
    /// run's window ends (a later run takes it on; this one no longer does), if a run started
    /// up to [`RETRY_SLACK`] after that still selects the call's minute (grace and
    /// [`MISSED_LOOKBACK`] after it); otherwise the notice is given up.
    async fn release_notice(&self, r: &DueCall, deadline: DateTime<Utc>) {
        let retry_at = self.end.max(self.clock().now());
        let minute_start = r.scheduled_at.utc().timestamp().div_euclid(60) * 60;
        let minute_end = DateTime::from_timestamp(minute_start + 60, 0).expect("a minute");
        if retry_at + RETRY_SLACK >= minute_end + self.grace + MISSED_LOOKBACK {
            tracing::error!(
                call_id = r.call_id.as_str(),
                device = self.device_hash(r),
                "missed-call notice given up: APNs did not take it before the call's minute left the runs' look-back"
            );
            return;
        }
        let released = self
            .resolved(deadline, || async {
                let _permits = (self.permit().await, self.store_permit_after().await);
                let now = self.clock().now();
                self.dispatcher
                    .store
                    .release_notice(&r.device_id, &r.call_id, &self.token, now, retry_at)
                    .await
            })
            .await;
        match released {
            Ok(true) => tracing::info!(
                call_id = r.call_id.as_str(),
                device = self.device_hash(r),
                retry_at = crate::domain::reservation::rfc3339_millis(retry_at),
                "missed-call notice released for a later run"
            ),
            Ok(false) => {}
            Err(e) => {
                tracing::error!(error = %e, call_id = r.call_id.as_str(), "missed-call notice not released: the store did not answer");
            }
        }
    }

    /// Claims `r`'s notice for this run, each request made again without an answer until
    /// `deadline`: whether this run holds it.
    async fn claim_notice(
        &self,
        r: &DueCall,
        deadline: DateTime<Utc>,
    ) -> Result<bool, crate::store::StoreError> {
        self.resolved(deadline, || async {
            let _permits = (self.permit().await, self.store_permit_after().await);
            let now = self.clock().now();
            self.dispatcher
                .store
                .claim_notice(&r.device_id, &r.call_id, &self.token, now)
                .await
        })
        .await
    }

    /// Claims `r`'s released notice without a push: it can no longer be sent, and the claim
    /// takes it out of the index.
    async fn drop_notice(&self, r: &DueCall, deadline: DateTime<Utc>) {
        let dropped = self.claim_notice(r, deadline).await;
        match dropped {
            Ok(true) => tracing::warn!(
                call_id = r.call_id.as_str(),
                device = self.device_hash(r),
                "released missed-call notice dropped: past its lifetime, or no alert token"
            ),
            Ok(false) => {} // another run's
            Err(e) => {
                tracing::error!(error = %e, call_id = r.call_id.as_str(), "a released missed-call notice not dropped");
            }
        }
    }
}
