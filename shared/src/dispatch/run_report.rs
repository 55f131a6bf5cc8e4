//! What started a run ([`RunCause`]) and what it did ([`RunReport`], with lateness percentiles).

/// What started a run (for logs and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunCause {
    /// The every-minute EventBridge schedule.
    Schedule,
    /// POST /internal/dispatch, handed on through the stack's bus.
    Request,
    /// koe-local's in-process loop.
    Local,
    /// A part of a split minute, handed out by a coordinating run.
    Part,
    /// A reservation made for a second no run was sure to cover (`dispatch::wake`).
    Wake,
}

impl RunCause {
    pub fn as_str(self) -> &'static str {
        match self {
            RunCause::Schedule => "schedule",
            RunCause::Request => "request",
            RunCause::Local => "local",
            RunCause::Part => "part",
            RunCause::Wake => "wake",
        }
    }
}

/// What one run did. Every reservation the run took on ends in exactly one of `sent`, `failed`,
/// `missed`, `lost` (its claim was refused: cancelled, or another run has it), `released` (this
/// run gave its claim back before pushing: its push mark (its own, or its batch's) could not be
/// resolved in time; a later selection sends it), `abandoned` (this run gave it up after claiming and could not give the
/// claim back; a later run recovers it) or a store error (a push that went out but could not be
/// recorded counts as `sent` and as a store error).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunReport {
    pub cause: &'static str,
    /// Store reads made to select: per minute bucket and selection, its count and each of this
    /// run's shards of it (none when nothing was made for the minute).
    pub queries: u32,
    /// Reservations taken on.
    pub selected: u32,
    pub claimed: u32,
    pub sent: u32,
    pub failed: u32,
    pub missed: u32,
    pub lost: u32,
    pub abandoned: u32,
    pub released: u32,
    /// Of `failed`: pushes that may have left, so are never sent again: claims found abandoned
    /// after their push had started (the run that started it is gone), and pushes of this run
    /// that got no answer after they were sent (the connection broke, no answer in time).
    pub push_unknown: u32,
    /// Of `failed`: calls to a dead device, the app's state rather than a fault of ours: APNs
    /// called the token invalid (400 `BadDeviceToken`, 410 `Unregistered`: an uninstall, a
    /// stale token), or the device's record was gone (expired: an abandoned install).
    pub dead_tokens: u32,
    /// Store requests of the deliveries (device read, claim, push mark, release, outcome) that
    /// got no answer (a reply lost or late, a store error) and were then made again until
    /// answered: how often the run resolved a write whose outcome it did not know.
    pub resolved: u32,
    /// Store requests of the deliveries still without an answer at their deadline.
    pub unresolved: u32,
    /// Store requests made again after an error or no answer (delivery requests).
    pub store_retries: u32,
    /// Store requests the store refused for want of capacity (selection and deliveries).
    pub store_throttles: u32,
    /// APNs errors of this run's push attempts, by reason (APNs's `reason`, or the kind of
    /// failure when APNs did not answer: see `push_error_reason`).
    pub apns_errors: std::collections::BTreeMap<String, u32>,
    /// Device tokens removed because APNs called them invalid.
    pub tokens_removed: u32,
    pub store_errors: u32,
    /// For each sent push, how long after its `scheduledAt` it left, in milliseconds.
    pub lateness_ms: Vec<i64>,
    /// Parts of a split window this (coordinating) run handed out instead of running it.
    pub handed_out: u32,
    /// Of `sent`: pushes again (attempt 2 or later) of calls whose device confirms its calls and
    /// had not confirmed the earlier push within the wait.
    pub re_pushed: u32,
    /// Calls to such devices ended `unconfirmed`: every push left, none confirmed in time.
    pub unconfirmed: u32,
    /// Missed-call notices (alert pushes after a call ended `failed`, `missed` or
    /// `unconfirmed`) APNs took, and those not sent (refused, or their store requests got no
    /// answer).
    pub notices_sent: u32,
    pub notices_failed: u32,
    /// The run's wall time, from its start to its report.
    pub duration_ms: i64,
}

impl RunReport {
    /// Counts one APNs error.
    pub fn apns_error(&mut self, error: &crate::push::PushError) {
        *self
            .apns_errors
            .entry(push_error_reason(error))
            .or_default() += 1;
    }

    pub fn max_lateness_ms(&self) -> Option<i64> {
        self.lateness_ms.iter().copied().max()
    }

    /// The `p`-th percentile (0..=100) of the latenesses.
    pub fn lateness_percentile(&self, p: usize) -> Option<i64> {
        let mut sorted = self.lateness_ms.clone();
        sorted.sort_unstable();
        let last = sorted.len().checked_sub(1)?;
        sorted.get((last * p.min(100)).div_ceil(100)).copied()
    }
}

/// A push error's reason as a metric dimension: APNs's own reason when it answered (one of its
/// documented names), otherwise the kind of failure, so the dimension's values stay few.
pub fn push_error_reason(error: &crate::push::PushError) -> String {
    use crate::push::PushError;
    let documented = |reason: &str| {
        (1..=40).contains(&reason.len()) && reason.chars().all(|c| c.is_ascii_alphabetic())
    };
    match error {
        PushError::InvalidToken { reason, .. }
        | PushError::Retryable {
            status: Some(_),
            reason,
        }
        | PushError::Rejected {
            status: Some(_),
            reason,
        } if documented(reason) => reason.clone(),
        PushError::InvalidToken { .. } => "InvalidToken".into(),
        PushError::Retryable { status: None, .. } => "NotSent".into(),
        PushError::MaybeDelivered { .. } => "NoAnswer".into(),
        PushError::Retryable { .. } | PushError::Rejected { .. } => "Other".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_lateness() {
        let report = RunReport {
            lateness_ms: vec![30, 10, 20, 40, 1000],
            ..RunReport::default()
        };
        assert_eq!(report.max_lateness_ms(), Some(1000));
        assert_eq!(report.lateness_percentile(50), Some(30));
        assert_eq!(report.lateness_percentile(0), Some(10));
        assert_eq!(report.lateness_percentile(100), Some(1000));
        assert_eq!(RunReport::default().lateness_percentile(50), None);
    }

    #[test]
    fn push_errors_are_counted_by_a_reason_from_a_small_set() {
        use crate::push::PushError;
        let mut report = RunReport::default();
        for error in [
            PushError::InvalidToken {
                status: 410,
                reason: "Unregistered".into(),
            },
            PushError::Retryable {
                status: Some(429),
                reason: "TooManyRequests".into(),
            },
            PushError::Retryable {
                status: Some(429),
                reason: "TooManyRequests".into(),
            },
            PushError::Retryable {
                status: None,
                reason: "connection refused (os error 111)".into(),
            },
            PushError::MaybeDelivered {
                reason: "stream reset after the request was sent".into(),
            },
            PushError::Rejected {
                status: Some(403),
                reason: "a body that was not APNs's JSON".into(),
            },
        ] {
            report.apns_error(&error);
        }
        let counted: Vec<(&str, u32)> = report
            .apns_errors
            .iter()
            .map(|(reason, n)| (reason.as_str(), *n))
            .collect();
        assert_eq!(
            counted,
            [
                ("NoAnswer", 1),
                ("NotSent", 1),
                ("Other", 1),
                ("TooManyRequests", 2),
                ("Unregistered", 1)
            ]
        );
    }
}
