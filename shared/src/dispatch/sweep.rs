//! The sweep: the minutes older than a run's look-back that no run selected (the dispatcher
//! down longer than grace + [`MISSED_LOOKBACK`](super::MISSED_LOOKBACK)) are selected by a later
//! run, so their calls are recorded `missed` (and counted) instead of staying `scheduled`.
//!
//! A process remembers the first minute its runs have not selected ([`Sweep`]); a run whose
//! look-back starts after it selects the minutes between too, at most [`SWEEP_PER_RUN`] of
//! them. Runs a minute apart leave no such minute, so an idle stack's minute costs nothing
//! more. A new process starts from the store's sweep mark (every minute before it selected by
//! some run: one read), and a process whose runs have selected every minute since the mark
//! raises it to its look-back, at most once per [`MARK_EVERY`] (one write).

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};

use crate::store::DispatchStore;

/// The most minutes before its look-back one run sweeps (their counts are read with the run's
/// own, before them: a few rounds of [`SELECTION_QUERIES_IN_FLIGHT`](super::SELECTION_QUERIES_IN_FLIGHT)).
pub const SWEEP_PER_RUN: Duration = Duration::minutes(120);
/// How far behind the look-back the store's mark may be before a run raises it.
const MARK_EVERY: Duration = Duration::hours(1);

/// What this process's runs have selected (shared by the dispatcher's clones).
#[derive(Clone, Default)]
pub(super) struct Sweep(Arc<Mutex<Swept>>);

#[derive(Default)]
struct Swept {
    /// The first minute no run here has selected (`None`: not read from the store yet).
    next: Option<DateTime<Utc>>,
    /// The store's mark, as last read or written.
    mark: Option<DateTime<Utc>>,
}

/// The minutes one run sweeps: `[from, until)`, and where the process stands once its first
/// selection has been made without a store error ([`Sweep::done`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub(super) from: DateTime<Utc>,
    pub(super) until: DateTime<Utc>,
    next: DateTime<Utc>,
    caught_up: bool,
}

fn minute_of(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp().div_euclid(60) * 60, 0).expect("a representable minute")
}

impl Sweep {
    fn swept(&self) -> std::sync::MutexGuard<'_, Swept> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The minutes a run that started at `started`, looking back to `lookback`, sweeps (empty
    /// when none); `None` if the mark could not be read (the next run reads it again).
    pub(super) async fn span(
        &self,
        store: &dyn DispatchStore,
        started: DateTime<Utc>,
        lookback: DateTime<Utc>,
    ) -> Option<Span> {
        let lookback = minute_of(lookback);
        let known = self.swept().next;
        let next = match known {
            Some(next) => next,
            None => match store.swept_before().await {
                Ok(mark) => {
                    self.swept().mark = mark;
                    mark.map_or(lookback, minute_of)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "dispatch sweep mark not read");
                    return None;
                }
            },
        };
        let from = next.min(lookback);
        let until = (from + SWEEP_PER_RUN).min(lookback);
        let caught_up = until >= lookback;
        Some(Span {
            from,
            until,
            next: if caught_up { minute_of(started) } else { until },
            caught_up,
        })
    }

    /// The run's first selection has covered `span` (and its look-back): the process stands at
    /// its end, and raises the store's mark if it has fallen [`MARK_EVERY`] behind.
    pub(super) async fn done(
        &self,
        store: &dyn DispatchStore,
        span: Span,
        lookback: DateTime<Utc>,
    ) {
        let lookback = minute_of(lookback);
        let raise = {
            let mut swept = self.swept();
            swept.next = Some(swept.next.map_or(span.next, |n| n.max(span.next)));
            let behind = swept.mark.is_none_or(|m| m < lookback - MARK_EVERY);
            let raise = span.caught_up && behind;
            if raise {
                swept.mark = Some(lookback);
            }
            raise
        };
        if raise && let Err(e) = store.raise_swept_before(lookback).await {
            tracing::warn!(error = %e, "dispatch sweep mark not raised");
            self.swept().mark = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::platform::clock::utc as t;
    use crate::store::memory::MemoryStore;

    /// A run started at `started` that looks back 7 minutes from `at`: the minutes it sweeps
    /// (`from`, `until`), once it is done.
    async fn run(
        sweep: &Sweep,
        store: &MemoryStore,
        started: DateTime<Utc>,
        at: &str,
    ) -> (DateTime<Utc>, DateTime<Utc>) {
        let lookback = t(at) - Duration::minutes(7);
        let span = sweep.span(store, started, lookback).await.unwrap();
        let swept = (span.from, span.until);
        sweep.done(store, span, lookback).await;
        swept
    }

    #[tokio::test]
    async fn a_process_sweeps_from_the_mark_then_only_its_own_gaps() {
        let store = MemoryStore::new();
        let sweep = Sweep::default();
        // No mark yet: nothing to sweep, and the mark is set to the look-back; the next minute's
        // run: nothing to sweep, no write.
        for at in ["2026-01-01T10:00:05Z", "2026-01-01T10:01:05Z"] {
            let (from, until) = run(&sweep, &store, t(at), at).await;
            assert_eq!(from, until, "{at}");
            assert_eq!(
                store.swept_before().await.unwrap(),
                Some(t("2026-01-01T09:53:00Z")),
                "{at}"
            );
        }
        // Three hours without a run: 120 minutes, then the rest.
        let later = t("2026-01-01T13:01:05Z");
        assert_eq!(
            run(&sweep, &store, later, "2026-01-01T13:01:05Z").await,
            (t("2026-01-01T10:01:00Z"), t("2026-01-01T12:01:00Z"))
        );
        assert_eq!(
            run(&sweep, &store, later, "2026-01-01T13:02:05Z").await,
            (t("2026-01-01T12:01:00Z"), t("2026-01-01T12:55:00Z"))
        );
        assert_eq!(
            store.swept_before().await.unwrap(),
            Some(t("2026-01-01T12:55:00Z"))
        );
        // A new process starts from the mark.
        let fresh = Sweep::default();
        let look = t("2026-01-01T14:00:05Z") - Duration::minutes(7);
        let span = fresh
            .span(&store, t("2026-01-01T14:00:05Z"), look)
            .await
            .unwrap();
        assert_eq!(
            (span.from, span.until),
            (t("2026-01-01T12:55:00Z"), t("2026-01-01T13:53:00Z"))
        );
    }
}
