//! When a new reservation wakes a dispatcher: its second comes before the minute schedule's next
//! run can take it on, and no run has promised to watch its minute until then.
//!
//! A run ends as soon as nothing is due in its window (`run`), so a reservation made after a
//! run's selection is seen by no one until the schedule's next run, up to a minute later. A run
//! that stays promises, on each minute's count item, to select it again until its latest call
//! ([`DispatchStore::watch_minute`]). A create the schedule may be late for claims the duty of
//! waking a run on its minute's count item ([`DispatchStore::claim_wake`]: it raises the
//! minute's watch to the end of the gap, [`gap_end`], unless a promise already reaches the
//! call's second), and only the create that claims it wakes a run ([`DispatchTrigger::wake`]:
//! in a Lambda one "Koe Dispatch Wake" event, which the stack's rule delivers to the dispatch
//! function). The woken run stays until the gap's end, so at most one wake per minute is sent
//! however many creates come at once. A lost or refused wake costs lateness within grace: the
//! schedule's next run still sends the calls.

use chrono::{DateTime, Duration, Utc};

use super::trigger::DispatchTrigger;
use crate::domain::reservation::{CallId, minute_bucket};
use crate::store::DispatchStore;

/// How late past its minute the schedule's run may start (EventBridge's delivery, a cold start,
/// its selection) and still take on a call due then before its claim: calls due earlier in the
/// minute wake a run.
pub const SCHEDULE_SLACK: Duration = Duration::seconds(15);
/// How long after a create the bucket index may not show it yet (the index is eventually
/// consistent): a run whose selection starts within this of the create may not see it.
pub const INDEX_LAG: Duration = Duration::seconds(1);
/// The most a create waits for its wake to be handed on (one EventBridge PutEvents).
pub const WAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// The end of the gap the minute schedule leaves after a create at `now`: its next run that
/// surely sees the create starts at the first minute after `now + INDEX_LAG`, and takes on in
/// time only calls due [`SCHEDULE_SLACK`] or more after that.
pub fn gap_end(now: DateTime<Utc>) -> DateTime<Utc> {
    let seen_from = (now + INDEX_LAG).timestamp();
    let next_run = DateTime::from_timestamp((seen_from.div_euclid(60) + 1) * 60, 0)
        .expect("a representable minute");
    next_run + SCHEDULE_SLACK
}

/// Whether the minute schedule alone may be late for a call due at `due_at` made at `now`.
pub fn schedule_may_be_late(now: DateTime<Utc>, due_at: DateTime<Utc>) -> bool {
    due_at < gap_end(now)
}

/// The longest a woken run stays: from a create just before a minute to that gap's end (the
/// function's timeout covers it: `budgets.rs`).
pub const LONGEST_WAKE: std::time::Duration = std::time::Duration::from_secs(76);

/// What a create's wake did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// The schedule's next run takes it on in time.
    NotNeeded,
    /// A run promised to select its minute until its second (one that stays, or one another
    /// create woke).
    Watched,
    /// A run was asked for.
    Sent,
    /// The wake was claimed but could not be handed on: the schedule's next run sends the
    /// call (and the minute's others that found the claim), late within grace.
    Failed(String),
}

/// Wakes a run for a call due at `due_at`, made at `now`, if no run is sure to take it on in
/// time and no other create has claimed the wake. A claim whose answer did not come counts as
/// won (one wake too many costs a short run, one too few a late call).
pub async fn wake_for(
    store: &dyn DispatchStore,
    trigger: &dyn DispatchTrigger,
    claimant: &CallId,
    now: DateTime<Utc>,
    due_at: DateTime<Utc>,
) -> Wake {
    if !schedule_may_be_late(now, due_at) {
        return Wake::NotNeeded;
    }
    let until = gap_end(now);
    if let Ok(false) = store
        .claim_wake(&minute_bucket(due_at), due_at, until, claimant.as_str())
        .await
    {
        return Wake::Watched;
    }
    match tokio::time::timeout(
        crate::platform::deadline::cap(WAKE_TIMEOUT),
        trigger.wake(due_at, until),
    )
    .await
    {
        Ok(Ok(())) => Wake::Sent,
        Ok(Err(e)) => Wake::Failed(e.0),
        Err(_) => Wake::Failed(format!("no answer within {WAKE_TIMEOUT:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::platform::clock::utc as t;

    #[test]
    fn a_call_the_next_scheduled_run_takes_on_in_time_needs_no_wake() {
        let now = t("2026-01-01T00:00:20Z");
        // The next run starts at 00:01:00 and takes on calls due from 00:01:15.
        assert!(schedule_may_be_late(now, t("2026-01-01T00:00:30Z")));
        assert!(schedule_may_be_late(now, t("2026-01-01T00:01:14.999Z")));
        assert!(!schedule_may_be_late(now, t("2026-01-01T00:01:15Z")));
        assert!(!schedule_may_be_late(now, t("2026-01-01T07:00:00Z")));
        // Made within a second of the minute: that run's selection may not see it yet.
        let late = t("2026-01-01T00:00:59.500Z");
        assert!(schedule_may_be_late(late, t("2026-01-01T00:01:30Z")));
        assert!(schedule_may_be_late(late, t("2026-01-01T00:02:14Z")));
        assert!(!schedule_may_be_late(late, t("2026-01-01T00:02:15Z")));
    }
}
