//! An invocation's deadline: the time by which its answer must be out, taken once at the edge
//! (a Lambda's context, else the route's timeout) and spent by every slow step under it.
//!
//! The edge runs the handler inside [`scope`]; a store request, a wake, a secret's refresh or an
//! error notification made inside it waits at most [`cap`]`(its own timeout)`: the shorter of
//! its own timeout and what is left. A step that finds nothing left ends at once with
//! [`Expired`], which the handlers answer 503 `SERVICE_UNAVAILABLE` with `Retry-After`. Outside a
//! scope (the dispatcher's runs, which keep their own budgets) nothing is capped.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

tokio::task_local! {
    static DEADLINE: Instant;
}

/// A request's deadline as its runtime tells it (a Lambda's context), carried in the request's
/// extensions to the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline(pub Instant);

impl Deadline {
    /// From a Lambda context's deadline (milliseconds since the epoch), against the wall clock;
    /// `None` for none (0).
    pub fn from_lambda(deadline_ms: u64) -> Option<Deadline> {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        (deadline_ms > 0).then(|| {
            Deadline(Instant::now() + Duration::from_millis(deadline_ms.saturating_sub(now_ms)))
        })
    }
}

/// What an invocation keeps below its function's timeout for the runtime's own work (handing
/// the answer back, the last log lines).
pub const MARGIN: Duration = Duration::from_millis(500);

/// What the edge keeps for an answer that failed: its error notification (at most this) and the
/// access log. The handler's own deadline is this much before the invocation's.
pub const ANSWER_RESERVE: Duration = Duration::from_millis(1000);

/// Runs `future` with `deadline` as its deadline (a deadline already set outside is kept if it
/// is earlier).
pub async fn scope<F: Future>(deadline: Instant, future: F) -> F::Output {
    let deadline = DEADLINE
        .try_with(|outer| (*outer).min(deadline))
        .unwrap_or(deadline);
    DEADLINE.scope(deadline, future).await
}

/// The deadline in force, if any.
pub fn current() -> Option<Instant> {
    DEADLINE.try_with(|d| *d).ok()
}

/// What is left of the deadline (zero once it has passed); `None` outside a scope.
pub fn remaining() -> Option<Duration> {
    current().map(|d| d.saturating_duration_since(Instant::now()))
}

/// The shorter of `own` and what is left.
pub fn cap(own: Duration) -> Duration {
    remaining().map_or(own, |left| left.min(own))
}

/// The deadline was reached before the step could finish (or start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired;

impl std::fmt::Display for Expired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the invocation's deadline was reached")
    }
}

impl std::error::Error for Expired {}

/// `future` within what is left of the deadline (no limit outside a scope): its answer, or
/// [`Expired`] at once when nothing is left, or when the deadline passes first (the future is
/// dropped then, as a killed function would drop it).
pub async fn within<F: Future>(future: F) -> Result<F::Output, Expired> {
    match current() {
        None => Ok(future.await),
        Some(deadline) if deadline <= Instant::now() => Err(Expired),
        Some(deadline) => tokio::time::timeout_at(deadline, future)
            .await
            .map_err(|_| Expired),
    }
}

/// `future` within the shorter of `own` and what is left: `None` when that ran out first.
pub async fn bounded<F: Future>(own: Duration, future: F) -> Option<F::Output> {
    let limit = cap(own);
    if limit.is_zero() {
        return None;
    }
    tokio::time::timeout(limit, future).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_step_gets_the_shorter_of_its_timeout_and_what_is_left() {
        assert_eq!(
            cap(Duration::from_secs(3)),
            Duration::from_secs(3),
            "no scope"
        );
        let end = Instant::now() + Duration::from_secs(2);
        scope(end, async {
            assert_eq!(cap(Duration::from_secs(3)), Duration::from_secs(2));
            assert_eq!(cap(Duration::from_secs(1)), Duration::from_secs(1));
            let slow = tokio::time::sleep(Duration::from_secs(10));
            assert_eq!(within(slow).await, Err(Expired));
            assert_eq!(Instant::now(), end, "cut at the deadline, not later");
            assert_eq!(within(async { 7 }).await, Err(Expired), "nothing left");
            assert_eq!(bounded(Duration::from_secs(1), async { 7 }).await, None);
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_inner_scope_never_extends_the_outer_deadline() {
        let outer = Instant::now() + Duration::from_secs(1);
        scope(outer, async {
            scope(outer + Duration::from_secs(5), async {
                assert_eq!(current(), Some(outer));
            })
            .await;
            let inner = outer - Duration::from_millis(300);
            scope(inner, async { assert_eq!(current(), Some(inner)) }).await;
        })
        .await;
    }
}
