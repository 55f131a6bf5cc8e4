//! How many of the dispatcher's DynamoDB requests are out at once: one gate per process, shared
//! by its runs, whose limit follows how fast the store answers.
//!
//! A request that waits here costs nothing; one that waits in the store's own queue runs down
//! its single 500 ms attempt (`DISPATCH_ATTEMPT_TIMEOUT`) and, cut off, is made again while the
//! store still carries the first out: a crowded second whose requests exceed what the store
//! answers in time turns into timeouts that feed themselves (seen on DynamoDB Local: 1,000 calls
//! in one second, 7,375 attempts made again, p50 11 s late). So the limit is cut by a quarter
//! when the median request of a window takes longer than [`TARGET`] (a fifth of the attempt
//! timeout: the store is queueing), and raised by an eighth when it takes less than a quarter
//! of that while requests wait for the gate, between [`MIN_LIMIT`] and the configured
//! `store_concurrency` (the process's CPU: `DISPATCH_STORE_CONCURRENCY`). The median, so that
//! a share of lost replies (a request timed out, the others quick) does not shrink it; only
//! requests let in under the current limit judge it. DynamoDB itself answers in milliseconds
//! at any concurrency a process reaches, so there the limit rises to its cap and stays.
//!
//! What must be done before a second (device reads, claims, marks, give-backs: [`StoreGate::enter`])
//! goes first; what can wait (outcomes, notices, token removals: [`StoreGate::enter_after`])
//! waits while any of those does, so a crowded second's outcomes never hold up its claims.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, SemaphorePermit};
use tokio::time::Instant;

/// The median request time above which the store counts as queueing.
pub const TARGET: Duration = Duration::from_millis(100);
/// The fewest requests let out at once.
pub const MIN_LIMIT: usize = 8;
/// The limit a process starts with (below its cap): DynamoDB Local answers 64 requests within
/// [`TARGET`] on a loaded 2-core machine; DynamoDB raises it within a few windows.
const START_LIMIT: usize = 64;
/// Requests judged at once.
const WINDOW: usize = 16;

pub(super) struct StoreGate {
    permits: Semaphore,
    cap: usize,
    state: Mutex<State>,
    /// Requests that must be done before their second, waiting for a place.
    urgent: AtomicUsize,
    /// Told when a place may have come free for [`StoreGate::enter_after`]: one given back, or
    /// the last urgent request let in.
    freed: Notify,
}

struct State {
    limit: usize,
    /// Permits to forget as they come back (after a cut).
    debt: usize,
    /// Bumped at each change of the limit: a request judges only the limit it was let in under.
    generation: u64,
    window: Vec<Duration>,
}

/// One request's place at the gate; dropped when its answer (or its timeout) came.
pub(super) struct Pass<'a> {
    gate: &'a StoreGate,
    permit: Option<SemaphorePermit<'a>>,
    started: Instant,
    generation: u64,
}

impl StoreGate {
    /// A gate letting out at most `cap` requests at once (at least [`MIN_LIMIT`]).
    pub(super) fn new(cap: usize) -> StoreGate {
        let cap = cap.max(MIN_LIMIT);
        let limit = START_LIMIT.min(cap);
        StoreGate {
            permits: Semaphore::new(limit),
            cap,
            state: Mutex::new(State {
                limit,
                debt: 0,
                generation: 0,
                window: Vec::with_capacity(WINDOW),
            }),
            urgent: AtomicUsize::new(0),
            freed: Notify::new(),
        }
    }

    /// Waits for a place for a request that must be done before its second (first come, first
    /// served among them, ahead of every [`StoreGate::enter_after`]).
    pub(super) async fn enter(&self) -> Pass<'_> {
        self.urgent.fetch_add(1, Ordering::SeqCst);
        let permit = self.permits.acquire().await;
        if self.urgent.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.wake_after(self.permits.available_permits());
        }
        self.pass(permit.expect("the semaphore is never closed"))
    }

    /// Waits for a place for a request that can wait: one free while no request of
    /// [`StoreGate::enter`]'s waits (it never queues ahead of one).
    pub(super) async fn enter_after(&self) -> Pass<'_> {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.urgent.load(Ordering::SeqCst) == 0
                && let Ok(permit) = self.permits.try_acquire()
            {
                return self.pass(permit);
            }
            freed.await;
        }
    }

    /// Wakes up to `places` waiting [`StoreGate::enter_after`]s, one a place (not all of them
    /// at each place given back: a crowded second's thousand outcomes would each wake for each).
    fn wake_after(&self, places: usize) {
        for _ in 0..places {
            self.freed.notify_one();
        }
    }

    fn pass<'a>(&'a self, permit: SemaphorePermit<'a>) -> Pass<'a> {
        Pass {
            gate: self,
            permit: Some(permit),
            started: Instant::now(),
            generation: self.state().generation,
        }
    }

    /// The current limit.
    #[cfg(test)]
    fn limit(&self) -> usize {
        self.state().limit
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn leave(&self, permit: SemaphorePermit<'_>, took: Duration, generation: u64) {
        // Every place was taken as this one came back: requests may be waiting.
        let busy = self.permits.available_permits() == 0;
        let mut state = self.state();
        if state.debt > 0 {
            state.debt -= 1;
            permit.forget();
        } else {
            drop(permit);
            self.wake_after(1);
        }
        if generation != state.generation {
            return;
        }
        state.window.push(took);
        if state.window.len() < WINDOW {
            return;
        }
        state.window.sort_unstable();
        let median = state.window[WINDOW / 2];
        state.window.clear();
        let limit = state.limit;
        let next = if median > TARGET {
            (limit * 3 / 4).max(MIN_LIMIT)
        } else if median < TARGET / 4 && busy {
            (limit + (limit / 8).max(1)).min(self.cap)
        } else {
            limit
        };
        if next == limit {
            return;
        }
        state.generation += 1;
        state.limit = next;
        if next > limit {
            // Raised: pay off a debt first.
            let raise = next - limit;
            let paid = raise.min(state.debt);
            state.debt -= paid;
            self.permits.add_permits(raise - paid);
            self.wake_after(raise - paid);
        } else {
            // Cut: take back what is free now, the rest as it comes back.
            let mut cut = limit - next;
            while cut > 0 {
                match self.permits.try_acquire() {
                    Ok(p) => {
                        p.forget();
                        cut -= 1;
                    }
                    Err(_) => break,
                }
            }
            state.debt += cut;
        }
        let median_ms = median.as_millis() as u64;
        match next < limit {
            true => tracing::info!(
                limit = next,
                median_ms,
                "dispatch store requests at once cut"
            ),
            false => tracing::debug!(
                limit = next,
                median_ms,
                "dispatch store requests at once raised"
            ),
        }
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.gate
                .leave(permit, self.started.elapsed(), self.generation);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` requests through the gate, each taking `took` (tokio's paused time).
    async fn requests(gate: &StoreGate, n: usize, took: Duration) {
        let mut all = Vec::new();
        for _ in 0..n {
            all.push(async {
                let _pass = gate.enter().await;
                tokio::time::sleep(took).await;
            });
        }
        futures_util::future::join_all(all).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_that_queues_gets_fewer_requests_at_once_a_quick_one_more() {
        let gate = StoreGate::new(1_400);
        assert_eq!(gate.limit(), START_LIMIT);
        requests(&gate, 200, TARGET * 2).await;
        let cut = gate.limit();
        assert!(cut < START_LIMIT, "slow answers cut it: {cut}");
        requests(&gate, 2_000, Duration::from_millis(5)).await;
        let raised = gate.limit();
        assert!(
            raised > START_LIMIT,
            "quick answers with requests waiting raise it: {raised}"
        );
        // What is out at once is the limit, also right after a cut (the debt).
        requests(&gate, 400, TARGET * 3).await;
        let limit = gate.limit();
        assert!(limit < raised);
        let passes: Vec<_> = futures_util::future::join_all((0..limit).map(|_| gate.enter())).await;
        assert!(
            gate.permits.try_acquire().is_err(),
            "no more than {limit} out"
        );
        drop(passes);
    }

    #[tokio::test(start_paused = true)]
    async fn what_can_wait_waits_while_a_request_due_before_its_second_does() {
        let gate = StoreGate::new(MIN_LIMIT);
        let order = Mutex::new(Vec::new());
        let held: Vec<_> =
            futures_util::future::join_all((0..MIN_LIMIT).map(|_| gate.enter())).await;
        let request = |name: &'static str, urgent: bool| {
            let (gate, order) = (&gate, &order);
            async move {
                let _pass = match urgent {
                    true => gate.enter().await,
                    false => gate.enter_after().await,
                };
                order.lock().unwrap().push(name);
            }
        };
        let release = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            drop(held);
        };
        // The outcome asks first, the claims after it: the claims go first.
        futures_util::future::join4(
            request("outcome", false),
            async {
                tokio::time::sleep(Duration::from_millis(1)).await;
                futures_util::future::join(request("claim 1", true), request("claim 2", true))
                    .await;
            },
            release,
            std::future::ready(()),
        )
        .await;
        assert_eq!(*order.lock().unwrap(), ["claim 1", "claim 2", "outcome"]);
    }

    #[tokio::test(start_paused = true)]
    async fn every_request_that_can_wait_gets_its_turn() {
        let gate = StoreGate::new(MIN_LIMIT);
        let done = AtomicUsize::new(0);
        let all = (0..300).map(|i| {
            let (gate, done) = (&gate, &done);
            async move {
                tokio::time::sleep(Duration::from_millis(i % 7)).await;
                let _pass = match i % 3 {
                    0 => gate.enter().await,
                    _ => gate.enter_after().await,
                };
                tokio::time::sleep(Duration::from_millis(1 + i % 5)).await;
                done.fetch_add(1, Ordering::SeqCst);
            }
        });
        let finished =
            tokio::time::timeout(Duration::from_secs(60), futures_util::future::join_all(all))
                .await;
        assert!(
            finished.is_ok(),
            "{} of 300 done",
            done.load(Ordering::SeqCst)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_share_of_lost_replies_does_not_cut_it() {
        let gate = StoreGate::new(1_400);
        let mut all = Vec::new();
        for i in 0..320 {
            let took = if i % 3 == 0 {
                Duration::from_millis(500)
            } else {
                Duration::from_millis(5)
            };
            let gate = &gate;
            all.push(async move {
                let _pass = gate.enter().await;
                tokio::time::sleep(took).await;
            });
        }
        futures_util::future::join_all(all).await;
        assert!(gate.limit() >= START_LIMIT, "{}", gate.limit());
    }

    #[tokio::test(start_paused = true)]
    async fn it_never_goes_below_its_floor_nor_above_its_cap() {
        let gate = StoreGate::new(100);
        requests(&gate, 3_000, Duration::from_secs(1)).await;
        assert_eq!(gate.limit(), MIN_LIMIT);
        requests(&gate, 20_000, Duration::from_millis(1)).await;
        assert_eq!(gate.limit(), 100);
    }
}
