//! The dispatcher's timing: how far ahead of its second each step of a delivery runs, waiting on
//! the `Clock`, and how a store request whose answer did not come is made again until resolved.

use std::future::Future;

use chrono::{DateTime, Duration, Utc};

use crate::platform::clock::Clock;
use crate::store::StoreError;

/// How long before the claim a reservation's device (its token) is read. A token replaced in
/// that moment is not used for this call; if the old one is rejected, the new one is kept (the
/// removal is conditional on the token).
pub(super) const DEVICE_READ_LEAD: Duration = Duration::milliseconds(1500);
/// How long before its second a claimed call's push is marked as started
/// (`Store::mark_push_started`, a device that confirms its calls; the others' mark is their
/// batch's, made when the push is due: `batch.rs`), made ahead so that it does not delay the
/// push.
pub(super) const MARK_LEAD: Duration = Duration::milliseconds(200);
/// How long before a reservation's device read its task is started. Until then a selected
/// reservation is only an entry in the run's `Pending` queue: a run that selects thousands at
/// once (every run starts with its whole minute) starts only the next few seconds' tasks, so
/// it neither delays the pushes due at that moment nor holds a sleeping task per reservation.
pub(super) const TASK_LEAD: Duration = Duration::seconds(1);
/// First pause before retrying a push or an outcome's write (then doubled).
pub(super) const FIRST_BACKOFF: Duration = Duration::milliseconds(100);
/// How long past its push budget a push that left is waited for, its answer: the APNs client's
/// request timeout (`ConnectionTimings::request`'s default). A push must leave within the budget
/// (`VoipPush::leave_by`), but one that left and is answered late (a busy process, a slow
/// APNs) is recorded by its answer, not cut off as "push state unknown".
pub const ANSWER_WAIT: std::time::Duration = crate::push::connection::REQUEST_TIMEOUT;

/// How long past its second a call's device read, claim or push mark that has no answer (a
/// reply lost, or later than the store's attempt timeout) is made again by its run, at most
/// (and never past grace). A slow DynamoDB costs lateness, not the call; past this the call is
/// left to a later run (within grace), which keeps a run inside its function's timeout
/// (`budgets.rs`).
pub const RESOLVE_BUDGET: std::time::Duration = std::time::Duration::from_secs(20);
/// When a request is made again: a uniform draw from zero to this after the last attempt
/// started, doubled after each attempt up to [`RESOLVE_MAX_PAUSE`]. Counted from the attempt's
/// start, so an attempt that timed out (the usual case: a reply lost or late, not a store that
/// needs relief) is followed almost at once, while quick refusals (throttling) back off.
const RESOLVE_FIRST_PAUSE: Duration = Duration::milliseconds(50);
const RESOLVE_MAX_PAUSE: Duration = Duration::milliseconds(800);

/// Returns once the clock reads `at` or later (never early, whatever the clock's sleep does).
pub(super) async fn wait_until(clock: &dyn Clock, at: DateTime<Utc>) {
    while clock.now() < at {
        clock.sleep_until(at).await;
    }
}

/// What [`until_resolved`] ended with: the request's last answer, and how many times it was
/// made again after a store error.
pub(super) struct Resolved<T> {
    pub answer: Result<T, StoreError>,
    pub retries: u32,
    /// Of the errors met, those that were the store's throttling.
    pub throttles: u32,
}

/// Makes `request` (a store request that is safe to make again: a read, or a write its own
/// run's token makes idempotent) until it answers without a store error, or until `deadline`,
/// with short jittered pauses between attempts.
pub(super) async fn until_resolved<T, F, Fut>(
    clock: &dyn Clock,
    deadline: DateTime<Utc>,
    mut request: F,
) -> Resolved<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut pause = RESOLVE_FIRST_PAUSE;
    let mut retries = 0;
    let mut throttles = 0;
    loop {
        let started = clock.now();
        let answer = request().await;
        match &answer {
            Ok(_) => {
                return Resolved {
                    answer,
                    retries,
                    throttles,
                };
            }
            Err(e) if e.throttled => throttles += 1,
            Err(_) => {}
        }
        let drawn = Duration::milliseconds(fastrand::i64(0..=pause.num_milliseconds()));
        let retry_at = (started + drawn).max(clock.now());
        if retry_at >= deadline {
            return Resolved {
                answer,
                retries,
                throttles,
            };
        }
        wait_until(clock, retry_at).await;
        retries += 1;
        pause = (pause * 2).min(RESOLVE_MAX_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// Tokio's (paused) time, from the epoch.
    struct TokioClock(tokio::time::Instant);

    #[async_trait::async_trait]
    impl Clock for TokioClock {
        fn now(&self) -> DateTime<Utc> {
            let elapsed = Duration::from_std(self.0.elapsed()).unwrap();
            DateTime::UNIX_EPOCH + elapsed
        }

        async fn sleep_until(&self, deadline: DateTime<Utc>) {
            if let Ok(wait) = (deadline - self.now()).to_std() {
                tokio::time::sleep(wait).await;
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_is_made_again_until_it_answers_or_the_deadline_passes() {
        let clock = TokioClock(tokio::time::Instant::now());
        let calls = Arc::new(AtomicU32::new(0));
        let failing_twice = || {
            let calls = calls.clone();
            async move {
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0 | 1 => Err(StoreError::new("reply lost")),
                    n => Ok(n),
                }
            }
        };
        let deadline = DateTime::UNIX_EPOCH + Duration::seconds(5);
        let resolved = until_resolved(&clock, deadline, failing_twice).await;
        assert_eq!((resolved.answer, resolved.retries), (Ok(2), 2));
        assert!(clock.now() < DateTime::UNIX_EPOCH + Duration::milliseconds(200));

        let never = || async { Err::<(), _>(StoreError::new("down")) };
        let resolved = until_resolved(&clock, deadline, never).await;
        assert!(resolved.answer.is_err());
        assert!(
            clock.now() < deadline,
            "no attempt starts past the deadline"
        );
        assert!(
            resolved.retries >= 5,
            "pauses stay short: {} retries in 5 s",
            resolved.retries
        );
    }
}
