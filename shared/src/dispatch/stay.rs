//! How long a run stays: until the latest second it has taken on, selecting again meanwhile, and
//! its promise of that to the creates (the minute's watch, `dispatch::wake`).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::task::JoinSet;

use super::run_state::Run;
use super::select::buckets;

/// Until when a run stays and selects again, and until when it has promised to.
pub(super) struct Stay {
    /// The latest second the run has taken on (its start while it has taken on none: a run
    /// whose first selection finds nothing due in its window ends there).
    pub(super) until: DateTime<Utc>,
    promised: DateTime<Utc>,
}

impl From<DateTime<Utc>> for Stay {
    /// A stay until `at_least` (its start, or a woken run's end of the gap), not yet promised
    /// to any minute.
    fn from(at_least: DateTime<Utc>) -> Stay {
        Stay {
            until: at_least,
            promised: DateTime::<Utc>::MIN_UTC,
        }
    }
}

impl Stay {
    /// Promises, on the count item of each minute from now to `until`, that the run selects
    /// them again until `until` (if that is later than its last promise), so that a create for
    /// a second before then wakes no other run. Among the run's tasks, so the run ends after
    /// it. A promise not written costs wakes, never a call: the run stays until `until` anyway.
    pub(super) fn promise(&mut self, run: &Arc<Run>, tasks: &mut JoinSet<()>) {
        let now = run.clock().now();
        if self.until <= self.promised.max(now) {
            return;
        }
        self.promised = self.until;
        let until = self.until;
        let minutes = buckets(now, until + chrono::Duration::milliseconds(1));
        let store = run.dispatcher.store.clone();
        tasks.spawn(async move {
            for minute in minutes {
                if let Err(e) = store.watch_minute(&minute, until).await {
                    tracing::warn!(error = %e, minute, "dispatch watch not written: creates wake runs");
                }
            }
        });
    }
}
