//! A minute too big for one invocation: the coordinator splits every minute's shards into parts
//! and hands all but the first to other invocations of the dispatch function.
//!
//! The run the schedule (or a requested run) starts is the coordinator: it reads the counts of
//! the minutes its window covers and, when they hold more than `calls_per_worker` calls, asks
//! for `ceil(calls / calls_per_worker)` parts (at most `max_workers`). All of them go out through
//! the [`DispatchTrigger`] (in a Lambda: one "Koe Dispatch Part" event each, which the stack's
//! rule delivers to the part function, so each part runs in an invocation of its own, with its
//! own vCPU and APNs connections), and itself returns (it runs in a small function sized for
//! small minutes). If the hand-out fails, it runs the whole minute itself: slower, never lost. Parts of one split never share a shard; parts of two
//! minutes' splits may, where their windows overlap, and the claim keeps each call to one push.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::dispatcher::Dispatcher;
use super::run::query_buckets;
use super::run_report::{RunCause, RunReport};
use super::select::buckets;
use super::trigger::DispatchTrigger;
use crate::domain::due::Part;

/// How many parts a window with `calls` calls is split into.
pub fn workers_for(calls: u64, calls_per_worker: u32, max_workers: u32) -> u32 {
    let per = u64::from(calls_per_worker.max(1));
    calls.div_ceil(per).clamp(1, u64::from(max_workers.max(1))) as u32
}

impl Dispatcher {
    /// Other invocations of the dispatch function take parts of big minutes (see the module).
    pub fn fanning_out(mut self, trigger: Arc<dyn DispatchTrigger>) -> Dispatcher {
        self.fan_out = Some(trigger);
        self
    }

    /// A coordinating run: splits the window's minutes into parts if they need it and hands them
    /// out (its report then counts only `handed_out`); otherwise, or without a way to hand parts
    /// out, the whole run.
    pub async fn coordinate(&self, cause: RunCause) -> RunReport {
        self.coordinate_staying(cause, None).await
    }

    /// A woken run (`wake`): coordinates as the schedule's run does, and a run it makes itself
    /// stays until `until`.
    pub async fn woken(&self, until: DateTime<Utc>) -> RunReport {
        self.coordinate_staying(RunCause::Wake, Some(until)).await
    }

    async fn coordinate_staying(&self, cause: RunCause, until: Option<DateTime<Utc>>) -> RunReport {
        let whole = || self.run_staying(cause, Part::WHOLE, until);
        let Some(trigger) = self.fan_out.clone() else {
            return whole().await;
        };
        let workers = self.workers_needed().await;
        if workers > 1 {
            let parts: Vec<Part> = (0..workers).filter_map(|i| Part::new(i, workers)).collect();
            match trigger.hand_out(&parts).await {
                Ok(()) => {
                    tracing::info!(parts = workers, "dispatch minute split into parts");
                    let report = RunReport {
                        cause: cause.as_str(),
                        handed_out: workers,
                        ..RunReport::default()
                    };
                    self.measured(&report);
                    return report;
                }
                Err(e) => {
                    tracing::error!(error = %e, parts = workers, "dispatch parts not handed out; running the whole minute here");
                }
            }
        }
        whole().await
    }

    /// How many parts this window needs: the calls made for the minutes it covers (a store
    /// error counts as none: the run then does all, as before any split). Its two or three
    /// counts are read at once; the parts' shard queries are each run's own (`select`).
    async fn workers_needed(&self) -> u32 {
        let now = self.clock.now();
        let settings = self.settings();
        let end = now + chrono::Duration::from_std(settings.window).expect("small");
        let store = self.store.clone();
        let counts = query_buckets(buckets(now, end), move |minute| {
            let store = store.clone();
            async move { store.due_count(&minute).await }
        })
        .await;
        let mut calls = 0u64;
        for (minute, count) in counts {
            match count {
                Ok(count) => calls += u64::from(count),
                Err(e) => tracing::warn!(error = %e, minute, "dispatch could not count a minute"),
            }
        }
        workers_for(calls, settings.calls_per_worker, settings.max_workers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_gets_one_part_per_calls_per_worker_within_the_maximum() {
        assert_eq!(workers_for(0, 5_000, 16), 1);
        assert_eq!(workers_for(5_000, 5_000, 16), 1);
        assert_eq!(workers_for(5_001, 5_000, 16), 2);
        assert_eq!(workers_for(100_000, 5_000, 16), 16);
        assert_eq!(workers_for(100_000, 5_000, 64), 20);
        assert_eq!(
            workers_for(7, 0, 0),
            1,
            "nonsense settings still give one part"
        );
    }
}
