//! The [`Dispatcher`] and its run loop: select by minute bucket, queue, start each task in time.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::task::JoinSet;

use super::dispatcher::Dispatcher;
use super::pending::{Pending, Task};
use super::run_report::{RunCause, RunReport};
use super::run_state::{Run, chrono_duration};
use super::select::{Answer, Found, Selection, buckets};
use super::stay::Stay;
use super::step_outcomes::Again;
use super::timing::{DEVICE_READ_LEAD, TASK_LEAD, wait_until};
use super::wake::LONGEST_WAKE;
use crate::domain::due::{DueCall, Part};
use crate::domain::reservation::{CallId, rfc3339_millis};
use crate::store::StoreError;

/// How far beyond grace a run's first selection looks back, so that reservations nobody sent
/// during a short outage of the dispatcher are marked `missed` instead of staying `scheduled`.
pub const MISSED_LOOKBACK: chrono::Duration = chrono::Duration::minutes(5);
/// Re-selection is never more frequent than this, whatever the settings say.
const MIN_RESELECT: Duration = Duration::from_millis(100);

impl Dispatcher {
    /// One run: returns when every reservation due before the window's end has been handled.
    pub async fn run(&self, cause: RunCause) -> RunReport {
        self.run_part(cause, Part::WHOLE).await
    }

    /// One run over `part` of every minute's shards (a worker's share of a fanned-out minute).
    pub async fn run_part(&self, cause: RunCause, part: Part) -> RunReport {
        self.run_staying(cause, part, None).await
    }

    /// One run that stays at least until `at_least` (a woken run: `wake`), its window reaching
    /// that far (at most [`LONGEST_WAKE`] from its start).
    pub(super) async fn run_staying(
        &self,
        cause: RunCause,
        part: Part,
        at_least: Option<DateTime<Utc>>,
    ) -> RunReport {
        let started = self.clock.now();
        let at_least = at_least.map(|t| t.min(started + chrono_duration(LONGEST_WAKE)));
        let mut run = Run::new(self.clone(), cause, started);
        run.end = run.end.max(at_least.unwrap_or(started));
        run.parts = part.of;
        let run = Arc::new(run);
        tracing::info!(
            cause = cause.as_str(),
            run = run.token.as_str(),
            part = part.index,
            of = part.of,
            window_end = rfc3339_millis(run.end),
            "dispatch run started"
        );
        // The calls taken on, each at the time it was due when taken (found due later, it is
        // taken on again), and those another run here held when found (`Run::take_on`).
        let mut known = HashMap::new();
        let mut others = HashSet::new();
        let mut changes = self.in_flight.changes();
        let mut pending = Pending::default();
        let mut tasks = JoinSet::new();
        let mut selection = Selection::of_store(self.store.clone(), part);
        let lookback = started - run.grace - MISSED_LOOKBACK;
        // A whole run also sweeps the minutes before its look-back no run selected (`sweep`);
        // a part selects only its shards, so it leaves the sweep to whole runs.
        let mut sweep = match part == Part::WHOLE {
            true => {
                self.sweep
                    .span(self.store.as_ref(), started, lookback)
                    .await
            }
            false => None,
        };
        if let Some(span) = sweep.filter(|s| s.from < s.until) {
            selection.cover(buckets(span.from, span.until));
        }
        selection.cover(buckets(lookback, run.end));
        let every = chrono_duration(self.settings().reselect_every.max(MIN_RESELECT));
        let mut tick = started + every;
        // Until when the run stays and selects again: the latest second it has taken on (none
        // yet: it ends once its first selection is done), and what it promised to watch. A part
        // of a split minute stays its whole window: the minute's watch holds only while every
        // part selects its own shards.
        let at_least = if part == Part::WHOLE {
            at_least.unwrap_or(started).max(started)
        } else {
            run.end
        };
        let mut stay = Stay::from(at_least);
        // The selection's answers are taken on as they come, while the calls already selected
        // keep starting on time: a minute whose queries take long delays no other call.
        loop {
            // Whether another run here still holds a call found due in this window: this run
            // waits for it, so that a push again that run hands over is taken on at once. Seen
            // before the hand-overs are taken, so none handed over meanwhile is left behind.
            let waiting = self.clock.now() < run.end && {
                others.retain(|c| self.in_flight.is_held(c));
                !others.is_empty()
            };
            let now = self.clock.now();
            for call in self.in_flight.handed_over(run.end) {
                let latest = run.take_on(call, now, &mut known, &mut others, &mut pending);
                stay.until = stay.until.max(latest.unwrap_or(stay.until));
            }
            run.start_due(&mut pending, &mut tasks);
            if self.clock.now() >= run.end {
                selection.stop();
            }
            let selecting = !selection.is_idle();
            let horizon = stay.until.min(run.end);
            let wake = match (tick < horizon, pending.next_start()) {
                (true, Some(start)) => Some(tick.min(start)),
                (true, None) => Some(tick),
                (false, Some(start)) => Some(start),
                (false, None) if selecting || waiting => None,
                (false, None) => break,
            };
            let clock = self.clock.clone();
            tokio::select! {
                answer = selection.next(), if selecting => {
                    let found = (&mut known, &mut others);
                    let latest = run.take_answer(answer, found, &mut pending);
                    stay.until = stay.until.max(latest.unwrap_or(stay.until));
                    if selection.is_idle() {
                        // The first selection, made without a store error, swept its span.
                        if let Some(span) = sweep.take()
                            && run.report().store_errors == 0
                        {
                            let (swept, store) = (self.sweep.clone(), self.store.clone());
                            tasks.spawn(async move {
                                swept.done(store.as_ref(), span, lookback).await;
                            });
                        }
                        run.prepare_pushes(&pending);
                        stay.promise(&run, &mut tasks);
                    }
                }
                // A call of another run here released or handed over (the sender lives as long
                // as the dispatcher).
                _ = changes.changed() => {}
                () = async move {
                    match wake {
                        Some(wake) => wait_until(clock.as_ref(), wake).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
            if tick < stay.until.min(run.end) && self.clock.now() >= tick {
                selection.cover(buckets(self.clock.now(), run.end));
                tick += every;
            }
        }
        while let Some(joined) = tasks.join_next().await {
            if let Err(e) = joined {
                tracing::error!(error = %e, "dispatch task failed");
            }
        }
        let mut report = run.report();
        report.duration_ms = (self.clock.now() - started).num_milliseconds();
        tracing::info!(
            cause = report.cause,
            queries = report.queries,
            selected = report.selected,
            claimed = report.claimed,
            sent = report.sent,
            failed = report.failed,
            missed = report.missed,
            lost = report.lost,
            abandoned = report.abandoned,
            released = report.released,
            push_unknown = report.push_unknown,
            dead_tokens = report.dead_tokens,
            resolved = report.resolved,
            unresolved = report.unresolved,
            store_retries = report.store_retries,
            store_throttles = report.store_throttles,
            tokens_removed = report.tokens_removed,
            store_errors = report.store_errors,
            max_late_ms = report.max_lateness_ms(),
            p50_late_ms = report.lateness_percentile(50),
            p99_late_ms = report.lateness_percentile(99),
            "dispatch run finished"
        );
        self.measured(&report);
        report
    }
}

impl Run {
    /// Takes on what one selection request found: a count only counts (the selection queues
    /// the minute's shards), a shard's calls are taken on. One that failed (throttled, say) is
    /// made again by the next re-selection.
    /// Returns the latest second of the calls it took on.
    fn take_answer(
        &self,
        (query, answer): Answer,
        (known, others): (&mut HashMap<CallId, DateTime<Utc>>, &mut HashSet<CallId>),
        pending: &mut Pending,
    ) -> Option<DateTime<Utc>> {
        self.tally(|t| t.queries += 1);
        match answer {
            Ok(Found::Count(_)) => None,
            Ok(Found::Calls(due)) => {
                let now = self.clock().now();
                due.into_iter()
                    .filter_map(|call| self.take_on(call, now, known, others, pending))
                    .max()
            }
            Err(e) => {
                self.tally(|t| {
                    t.store_errors += 1;
                    t.store_throttles += u32::from(e.throttled);
                });
                let minute = query.minute.as_str();
                match query.shard_index() {
                    None => tracing::error!(error = %e, minute, "dispatch selection failed"),
                    Some(shard) => {
                        tracing::error!(error = %e, minute, shard, "dispatch shard query failed");
                    }
                }
                None
            }
        }
    }

    /// Opens APNs connections for the busiest second ahead, before it (a pool's; a no-op for a
    /// single sender).
    fn prepare_pushes(&self, pending: &Pending) {
        let busiest = pending.busiest_second();
        if busiest > 0 {
            let push = self.dispatcher.push.clone();
            tokio::spawn(async move { push.prepare(busiest).await });
        }
    }

    /// Takes a selected (or handed-over) call on (its second, if it did). A call this run
    /// knows is taken on again only when found due later than it knew: a push again (this
    /// run's claim of the earlier one refused, say: another process's run pushed it).
    fn take_on(
        &self,
        mut call: DueCall,
        now: DateTime<Utc>,
        known: &mut HashMap<CallId, DateTime<Utc>>,
        others: &mut HashSet<CallId>,
        pending: &mut Pending,
    ) -> Option<DateTime<Utc>> {
        // Its next push: the reserved second, or the end of a confirmation wait.
        if known.get(&call.call_id).is_some_and(|k| *k >= call.due_at) || call.due_at >= self.end {
            return None;
        }
        // Another run of this process has it (and would win its claim anyway). Not `known`:
        // should that run give it up, a re-selection here takes it on; should it hand over its
        // push again, this run takes that on at once (`others`: it waits for them).
        let Some(held) = self.dispatcher.in_flight.take(&call.call_id) else {
            others.insert(call.call_id);
            return None;
        };
        // A push again handed over is due later than a stale answer may show.
        call.due_at = call.due_at.max(held.due_again.unwrap_or(call.due_at));
        let at = call.due_at;
        if at >= self.end {
            held.hand_over(call);
            return None;
        }
        known.insert(call.call_id.clone(), at);
        self.tally(|t| t.selected += 1);
        let (task, claim_at) = if at < now - self.grace {
            (Task::Miss, at - self.claim_lead)
        } else {
            let slots = self.slots(&call);
            (Task::Deliver(slots), slots.claim_at)
        };
        let start = claim_at - DEVICE_READ_LEAD - TASK_LEAD;
        pending.add(start, task, call, held);
        Some(at)
    }

    /// Gives every pending reservation whose start has come its task.
    fn start_due(self: &Arc<Self>, pending: &mut Pending, tasks: &mut JoinSet<()>) {
        for (task, r, held) in pending.take_until(self.clock().now()) {
            let run = self.clone();
            tasks.spawn(async move {
                let again = match task {
                    Task::Miss => {
                        run.miss(&r).await;
                        Again::No
                    }
                    Task::Deliver(slots) => run.deliver(&r, slots).await,
                };
                match again {
                    Again::No => held.finished(),
                    // Given back, or left on a store error: a later selection may take it.
                    Again::Later => drop(held),
                    Again::HandOver(call) => held.hand_over(call),
                }
            });
        }
    }
}

/// Queries every bucket at once and answers in bucket order. At once, so that a store outage
/// costs one store timeout, not one per bucket (the fan-out's counts; a run's selection sends
/// its counts at once too, `select`).
pub async fn query_buckets<F, Fut, T>(
    minutes: Vec<String>,
    query: F,
) -> Vec<(String, Result<T, StoreError>)>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<T, StoreError>> + Send + 'static,
    T: Send + 'static,
{
    let mut queries = JoinSet::new();
    for (i, minute) in minutes.into_iter().enumerate() {
        let answer = query(minute.clone());
        queries.spawn(async move { (i, minute, answer.await) });
    }
    let mut answers = Vec::with_capacity(queries.len());
    while let Some(joined) = queries.join_next().await {
        match joined {
            Ok(answer) => answers.push(answer),
            Err(e) => tracing::error!(error = %e, "dispatch selection query failed"),
        }
    }
    answers.sort_by_key(|(i, ..)| *i);
    answers.into_iter().map(|(_, m, a)| (m, a)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::platform::clock::utc as t;

    #[tokio::test(start_paused = true)]
    async fn an_outage_costs_one_store_timeout_per_selection_not_one_per_bucket() {
        let minutes = buckets(t("2026-01-01T00:00:05Z"), t("2026-01-01T00:10:00Z"));
        assert_eq!(minutes.len(), 10);
        let started = tokio::time::Instant::now();
        // Each query hangs for the store's whole operation timeout, then fails.
        let answers = query_buckets(minutes.clone(), |_| async {
            tokio::time::sleep(crate::store::dynamodb::OPERATION_TIMEOUT).await;
            Err::<Vec<()>, _>(StoreError::new("connection refused"))
        })
        .await;
        assert_eq!(
            started.elapsed(),
            crate::store::dynamodb::OPERATION_TIMEOUT,
            "all at once"
        );
        let order: Vec<&String> = answers.iter().map(|(m, _)| m).collect();
        assert_eq!(order, minutes.iter().collect::<Vec<_>>(), "in bucket order");
        assert!(answers.iter().all(|(_, a)| a.is_err()));
    }

    #[test]
    fn buckets_are_the_minutes_overlapping_the_span() {
        assert_eq!(
            buckets(t("2026-01-01T00:00:05Z"), t("2026-01-01T00:01:15Z")),
            vec!["2026-01-01T00:00Z", "2026-01-01T00:01Z"]
        );
        assert_eq!(
            buckets(t("2026-01-01T00:00:05Z"), t("2026-01-01T00:01:00Z")),
            vec!["2026-01-01T00:00Z"],
            "an end on the minute excludes that minute"
        );
        assert_eq!(
            buckets(t("2025-12-31T23:58:59.999Z"), t("2026-01-01T00:00:00.001Z")),
            vec![
                "2025-12-31T23:58Z",
                "2025-12-31T23:59Z",
                "2026-01-01T00:00Z"
            ]
        );
        assert!(buckets(t("2026-01-01T00:00:05Z"), t("2026-01-01T00:00:05Z")).len() <= 1);
    }
}
