//! Replies that come late, in-process: a [`Store`] that any store can be put behind
//! ([`HeldStore`]), for benchmarks and tests of a slow DynamoDB too big for `reply_drop`'s proxy.
//!
//! Within a window of (tokio) time, each request the dispatcher makes has its reply held with a
//! given probability, drawn when the request is made. A held request is carried out at once (the
//! write happens, the read reads) and its answer arrives `hold` later; the client sees what the
//! DynamoDB adapter's clients would (`koe::store::dynamodb`):
//!
//! - The dispatcher's requests on a call (`get_device`, `claim_due`, `mark_push_started`,
//!   `release_claim`, `finish_reservation`) go through the adapter's dispatch client: one
//!   attempt, cut off at [`DISPATCH_ATTEMPT_TIMEOUT`], no SDK retries. An answer held as long or
//!   longer is a store error at the attempt timeout; a shorter hold is only a late answer.
//! - Its other requests (`due_count`, `due_calls`, `get_reservation`, `remove_device`) go
//!   through the normal client: up to [`ATTEMPTS`] attempts of at most [`ATTEMPT_TIMEOUT`] each,
//!   the SDK's standard backoff between them (a uniform draw from `0..1 s × 2^(n-1)`), all
//!   within [`OPERATION_TIMEOUT`]. Each attempt is carried out again and drawn again (held or
//!   not), and the operation fails as a store error when no attempt is answered in time.
//!
//! The API's requests (devices, reservations, counters) pass through unheld: a benchmark makes
//! them before its window. Left out: the SDK's retry quota (a token bucket that stops retries
//! when many fail; the selection makes a handful of reads a second), and what the store behind
//! does with its own retries (`LimitedStore` retries a throttled read within the same 3 s
//! budget, counted apart from the attempts here).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use koe::store::dynamodb::{ATTEMPT_TIMEOUT, DISPATCH_ATTEMPT_TIMEOUT, OPERATION_TIMEOUT};
use koe::store::{Op, Store, StoreError};
use tokio::time::{Instant, sleep, sleep_until};

use super::limited_store::{ATTEMPTS, BACKOFF_BASE};

/// Which replies are held, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct HeldReplies {
    /// The probability that a request made within the window has its reply held (0 to 1).
    pub fraction: f64,
    /// How much later than the request its reply arrives.
    pub hold: Duration,
    /// The window: requests made at or after `from` and before `until`.
    pub from: Instant,
    pub until: Instant,
    /// Seeds the draws.
    pub seed: u64,
}

/// What the replies held did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldStats {
    /// Attempts whose reply was held (each carried out).
    pub held: u64,
    /// Of those, attempts held past their attempt timeout: cut off by the client (at the
    /// attempt timeout, or its operation's budget if that ends first).
    pub timed_out: u64,
    /// Requests that ended in a store error because no attempt was answered in time.
    pub failed: u64,
}

/// `inner` behind replies held as [`HeldReplies`] says.
pub struct HeldStore {
    inner: Arc<dyn Store>,
    rule: HeldReplies,
    rng: Mutex<fastrand::Rng>,
    held: AtomicU64,
    timed_out: AtomicU64,
    failed: AtomicU64,
}

impl HeldStore {
    pub fn new(inner: Arc<dyn Store>, rule: HeldReplies) -> HeldStore {
        assert!((0.0..=1.0).contains(&rule.fraction), "a probability");
        HeldStore {
            inner,
            rule,
            rng: Mutex::new(fastrand::Rng::with_seed(rule.seed)),
            held: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    pub fn stats(&self) -> HeldStats {
        HeldStats {
            held: self.held.load(Ordering::SeqCst),
            timed_out: self.timed_out.load(Ordering::SeqCst),
            failed: self.failed.load(Ordering::SeqCst),
        }
    }

    /// Whether a request made at `at` has its reply held.
    fn draw(&self, at: Instant) -> bool {
        let rule = &self.rule;
        rule.fraction > 0.0
            && (rule.from..rule.until).contains(&at)
            && self.rng.lock().unwrap().f64() < rule.fraction
    }

    /// One attempt of a request: carried out at once, answered now or `hold` later; `None` if
    /// the client cut it off at `timeout` first.
    async fn attempt<A>(&self, timeout: Duration, request: impl Future<Output = A>) -> Option<A> {
        let started = Instant::now();
        let held = self.draw(started);
        let answer = request.await;
        if !held {
            return Some(answer);
        }
        self.held.fetch_add(1, Ordering::SeqCst);
        let answered = Instant::now() + self.rule.hold;
        let cut_off = started + timeout;
        if answered < cut_off {
            sleep_until(answered).await;
            return Some(answer);
        }
        // Counted now: the operation's budget may end the wait first (then it never answers).
        self.timed_out.fetch_add(1, Ordering::SeqCst);
        sleep_until(cut_off).await;
        None
    }

    /// A request of the dispatch client: one attempt of at most [`DISPATCH_ATTEMPT_TIMEOUT`].
    async fn once<T, E: From<StoreError>>(
        &self,
        operation: &str,
        request: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        match self.attempt(DISPATCH_ATTEMPT_TIMEOUT, request).await {
            Some(answer) => answer,
            None => Err(self
                .failure(format!(
                    "{operation}: no answer within the attempt timeout \
                 ({DISPATCH_ATTEMPT_TIMEOUT:?}): reply held"
                ))
                .into()),
        }
    }

    /// A request of the normal client: the SDK's attempts and backoff within
    /// [`OPERATION_TIMEOUT`], each attempt made (and drawn) again.
    async fn retried<T, E, F, Fut>(&self, operation: &str, request: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let attempts = async {
            for attempt in 1..=ATTEMPTS {
                if let Some(answer) = self.attempt(ATTEMPT_TIMEOUT, request()).await {
                    return Ok(answer);
                }
                if attempt < ATTEMPTS {
                    let draw = self.rng.lock().unwrap().f64();
                    sleep(BACKOFF_BASE.mul_f64(draw * f64::from(1u32 << (attempt - 1)))).await;
                }
            }
            Err(format!(
                "{operation}: no answer in {ATTEMPTS} attempts of {ATTEMPT_TIMEOUT:?}: replies held"
            ))
        };
        match tokio::time::timeout(OPERATION_TIMEOUT, attempts).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(message)) => Err(self.failure(message).into()),
            Err(_) => Err(self
                .failure(format!(
                    "{operation}: no answer within the operation timeout ({OPERATION_TIMEOUT:?}): \
                 replies held"
                ))
                .into()),
        }
    }

    fn failure(&self, message: String) -> StoreError {
        self.failed.fetch_add(1, Ordering::SeqCst);
        StoreError::new(message)
    }
}

crate::store_layer!(HeldStore, |this, op, call| {
    let operation = op.request().as_str();
    match op {
        // The dispatcher's requests on a call, through the dispatch client.
        Op::GetDevice(..)
        | Op::ClaimDue(..)
        | Op::MarkPushStarted(..)
        | Op::ReleaseClaim(..)
        | Op::FinishReservation(..)
        | Op::ClaimNotice(..)
        | Op::NoticeSent(..)
        | Op::ReleaseNotice(..) => this.once(operation, call()).await,
        // Its other requests (and confirmations), through the normal client.
        Op::RemoveDevice(..)
        | Op::RemoveAlertToken(..)
        | Op::GetReservation(..)
        | Op::ConfirmCall(..)
        | Op::DueCount(..)
        | Op::DueCalls(..)
        | Op::WatchMinute(..)
        | Op::ClaimWake(..) => this.retried(operation, call).await,
        _ => call().await,
    }
});

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};
    use koe::domain::reservation::{Reservation, ReservationStatus, RunToken, minute_bucket};
    use koe::store::prelude::*;
    use koe::store::{ClaimAnswer, ClaimMark, memory::MemoryStore};

    use super::*;
    use crate::dispatching::reserve_at;
    use crate::on_call::OnCall;

    const HOLD: Duration = Duration::from_millis(1500);

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// An embedded store with one device and its call due at 07:00:00.
    async fn one_call() -> (Arc<MemoryStore>, Reservation) {
        let store = Arc::new(MemoryStore::new());
        let made = t("2026-01-01T06:00:00Z");
        let at = t("2026-01-01T07:00:00Z").fixed_offset();
        let r = reserve_at(store.as_ref(), "held", &"a".repeat(64), at, made).await;
        (store, r)
    }

    /// Every request made from now until `for_` later is held.
    fn every_reply(hold: Duration, for_: Duration) -> HeldReplies {
        let now = Instant::now();
        HeldReplies {
            fraction: 1.0,
            hold,
            from: now,
            until: now + for_,
            seed: 1,
        }
    }

    /// The one call's minute, made for until a create has counted it (one call id in 32 does),
    /// counted with every reply held for `for_`: the answer, its time.
    async fn due_count_held_for(for_: Duration) -> (Result<u32, StoreError>, Duration, HeldStore) {
        let (inner, r) = one_call().await;
        let minute = minute_bucket(r.scheduled_at.utc());
        for i in 0.. {
            if inner.due_count(&minute).await.unwrap() > 0 {
                break;
            }
            let (made, at) = (
                t("2026-01-01T06:00:00Z"),
                r.scheduled_at.utc().fixed_offset(),
            );
            reserve_at(
                inner.as_ref(),
                &format!("held-{i}"),
                &"a".repeat(64),
                at,
                made,
            )
            .await;
        }
        let store = HeldStore::new(inner, every_reply(HOLD, for_));
        let started = Instant::now();
        (store.due_count(&minute).await, started.elapsed(), store)
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_write_is_applied_and_answered_as_a_timeout() {
        let (inner, r) = one_call().await;
        let store = HeldStore::new(inner.clone(), every_reply(HOLD, Duration::from_secs(1)));
        let run = RunToken::generate();
        let now = t("2026-01-01T06:59:59.500Z");
        let started = Instant::now();
        let claim = store
            .claim_due_for(&r, &run, now, now, ClaimMark::InBatch(now))
            .await;
        assert!(claim.is_err(), "{claim:?}");
        assert_eq!(
            started.elapsed(),
            DISPATCH_ATTEMPT_TIMEOUT,
            "cut off, not held"
        );
        let stored = inner.get_reservation(&r.device_id, now).await.unwrap();
        let stored = stored.expect("the reservation");
        assert_eq!(
            (stored.status, stored.claimed_by.as_ref()),
            (ReservationStatus::Claimed, Some(&run)),
            "written at once"
        );
        assert_eq!(
            store.stats(),
            HeldStats {
                held: 1,
                timed_out: 1,
                failed: 1
            }
        );

        // Made again after the window: answered at once, and the claim is the run's own.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let started = Instant::now();
        let again = store
            .claim_due_for(&r, &run, now, now, ClaimMark::InBatch(now))
            .await;
        assert!(matches!(again.unwrap(), ClaimAnswer::Won { .. }));
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(store.stats().held, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reply_held_less_than_the_attempt_timeout_is_only_late() {
        let (inner, r) = one_call().await;
        let hold = Duration::from_millis(200);
        let store = HeldStore::new(inner, every_reply(hold, Duration::from_secs(1)));
        let started = Instant::now();
        let device = store.get_device(&r.device_id, Utc::now()).await.unwrap();
        assert!(device.is_some());
        assert_eq!(started.elapsed(), hold);
        assert_eq!(
            store.stats(),
            HeldStats {
                held: 1,
                timed_out: 0,
                failed: 0
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_held_every_time_fails_after_its_attempts_within_the_operation_budget() {
        let (count, took, store) = due_count_held_for(Duration::from_secs(60)).await;
        assert!(count.is_err());
        // At least two attempts cut off at 1 s each; the third only if the backoffs left room.
        assert!(
            took >= 2 * ATTEMPT_TIMEOUT && took <= OPERATION_TIMEOUT,
            "{took:?}"
        );
        let stats = store.stats();
        assert!((2..=3).contains(&stats.held), "{stats:?}");
        assert_eq!((stats.timed_out, stats.failed), (stats.held, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_whose_retry_is_answered_answers_after_one_attempt_timeout() {
        // Only the first attempt is in the window.
        let (count, took, store) = due_count_held_for(Duration::from_millis(1)).await;
        assert_eq!(count.unwrap(), koe::domain::due::COUNT_STEP);
        assert!(
            took >= ATTEMPT_TIMEOUT && took <= ATTEMPT_TIMEOUT + BACKOFF_BASE,
            "{took:?}"
        );
        assert_eq!(
            store.stats(),
            HeldStats {
                held: 1,
                timed_out: 1,
                failed: 0
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn requests_outside_the_window_or_not_drawn_are_not_held() {
        let (inner, r) = one_call().await;
        let now = Instant::now();
        let later = HeldReplies {
            fraction: 1.0,
            hold: HOLD,
            from: now + Duration::from_secs(1),
            until: now + Duration::from_secs(2),
            seed: 1,
        };
        let never = HeldReplies {
            fraction: 0.0,
            from: now,
            ..later
        };
        for rule in [later, never] {
            let store = HeldStore::new(inner.clone(), rule);
            assert!(
                store
                    .get_device(&r.device_id, Utc::now())
                    .await
                    .unwrap()
                    .is_some()
            );
            assert_eq!(now.elapsed(), Duration::ZERO);
            assert_eq!(store.stats(), HeldStats::default());
        }
    }
}
