//! The dispatcher: sends each call reservation's VoIP push at its second, exactly once.
//!
//! **A run** (every minute, from the schedule, a requested run, or koe-local's loop) covers the
//! reservations due before `start + window` (70 s: the minute until the next run plus 10 s of
//! overlap, so a next run that starts a few seconds late costs nothing):
//!
//! 1. It selects them by querying the time-bucket index one UTC minute at a time (never a scan):
//!    at the start from `grace` + [`MISSED_LOOKBACK`] back (overdue ones, and claims abandoned
//!    by a run that died), then every `reselect_every` (5 s) again from the current minute, so a
//!    reservation made after the run started (always at least 10 s ahead) is seen at least 5 s
//!    before its second.
//! 2. Each reservation gets a task that sleeps (on the `Clock`), reads the device's token 2 s
//!    before its second, claims it `claim_lead` (500 ms) before its second with one conditional
//!    write (`scheduled` → `claimed`, or an abandoned claim), sleeps to the second, pushes, and
//!    records `sent` or `failed`. Store calls and pushes are bounded by a semaphore
//!    (`concurrency`). A task is started only a second before its device read: until then a
//!    selected reservation waits in the run's queue, so a run that selects thousands at once
//!    starts only the next seconds' tasks and holds no sleeping task per reservation.
//! 3. Reservations more than `grace` late become `missed` without a push.
//!
//! **Exactly once.** The claim is the guard: of any number of runs (duplicated deliveries,
//! overlapping runs), one wins the conditional write and only the winner pushes. A cancel
//! deletes only a `scheduled` record, so it either lands before the claim (no push) or fails
//! with 409 TOO_LATE (the push goes out). A run that dies between claim and push leaves a
//! `claimed` record; once the claim is older than `claim_timeout` a later run re-claims it and
//! sends it (within grace). So that this can never overlap a live push, a run pushes only while
//! its claim is younger than half the claim timeout. The payload carries `callId`, so the app
//! can drop the rare duplicate left by a run that pushed and died before recording `sent`.

pub mod metrics;
pub mod trigger;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::task::JoinSet;

use crate::clock::Clock;
use crate::config::DispatchConfig;
use crate::domain::device::Device;
use crate::domain::reservation::{
    CallId, Reservation, ReservationStatus, minute_bucket, rfc3339_millis,
};
use crate::push::{PushError, PushSender, VoipPush};
use crate::store::{Outcome, Store};

/// How far beyond grace a run's first selection looks back, so that reservations nobody sent
/// during a short outage of the dispatcher are marked `missed` instead of staying `scheduled`.
pub const MISSED_LOOKBACK: chrono::Duration = chrono::Duration::minutes(5);
/// How long before the claim a reservation's device (its token) is read. A token replaced in
/// that moment is not used for this call; if the old one is rejected, the new one is kept (the
/// removal is conditional on the token).
const DEVICE_READ_LEAD: chrono::Duration = chrono::Duration::milliseconds(1500);
/// First pause before retrying a push (then doubled, plus up to half of it at random).
const FIRST_BACKOFF: chrono::Duration = chrono::Duration::milliseconds(100);
/// Re-selection is never more frequent than this, whatever the settings say.
const MIN_RESELECT: Duration = Duration::from_millis(100);

/// How long before a reservation's device read its task is started. Until then a selected
/// reservation is only an entry in the run's [`Pending`] queue: a run that selects thousands at
/// once (every run starts with its whole minute) starts only the next few seconds' tasks, so
/// it neither delays the pushes due at that moment nor holds a sleeping task per reservation.
const TASK_LEAD: chrono::Duration = chrono::Duration::seconds(1);

/// The calls that runs in this process have taken on and not yet finished.
#[derive(Clone, Default)]
pub struct InFlight(Arc<Mutex<HashSet<CallId>>>);

impl InFlight {
    /// Takes the call unless a run here already has it; the guard gives it back when dropped.
    fn take(&self, call_id: &CallId) -> Option<Held> {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        held.insert(call_id.clone()).then(|| Held {
            in_flight: self.clone(),
            call_id: call_id.clone(),
        })
    }

    /// How many calls are held (for tests).
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A call held by one run: released when its task ends, however it ends.
struct Held {
    in_flight: InFlight,
    call_id: CallId,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.in_flight.0.lock().unwrap_or_else(|p| p.into_inner());
        held.remove(&self.call_id);
    }
}

/// What a selected reservation's task will do.
#[derive(Debug, Clone, Copy)]
enum Task {
    Deliver,
    Miss,
}

/// A run's selected reservations whose tasks have not started, by start time.
#[derive(Default)]
struct Pending(std::collections::BTreeMap<DateTime<Utc>, Vec<(Task, Reservation, Held)>>);

impl Pending {
    fn add(&mut self, start: DateTime<Utc>, task: Task, r: Reservation, held: Held) {
        self.0.entry(start).or_default().push((task, r, held));
    }

    fn next_start(&self) -> Option<DateTime<Utc>> {
        self.0.keys().next().copied()
    }

    /// Removes and returns every entry whose start is at or before `now`, earliest first.
    fn take_until(&mut self, now: DateTime<Utc>) -> Vec<(Task, Reservation, Held)> {
        let later = self.0.split_off(&(now + chrono::Duration::nanoseconds(1)));
        std::mem::replace(&mut self.0, later)
            .into_values()
            .flatten()
            .collect()
    }
}

/// What started a run (for logs and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunCause {
    /// The every-minute EventBridge schedule.
    Schedule,
    /// POST /internal/dispatch, handed on through the stack's bus.
    Request,
    /// koe-local's in-process loop.
    Local,
}

impl RunCause {
    pub fn as_str(self) -> &'static str {
        match self {
            RunCause::Schedule => "schedule",
            RunCause::Request => "request",
            RunCause::Local => "local",
        }
    }
}

/// What one run did. Every reservation the run took on ends in exactly one of `sent`, `failed`,
/// `missed`, `lost` (its claim was refused: cancelled, or another run has it), `abandoned` (this
/// run gave it up after claiming; a later run recovers it) or a store error (a push that went
/// out but could not be recorded counts as `sent` and as a store error).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunReport {
    pub cause: &'static str,
    /// Index queries made (one per minute bucket per selection).
    pub queries: u32,
    /// Reservations taken on.
    pub selected: u32,
    pub claimed: u32,
    pub sent: u32,
    pub failed: u32,
    pub missed: u32,
    pub lost: u32,
    pub abandoned: u32,
    /// Device tokens removed because APNs called them invalid.
    pub tokens_removed: u32,
    pub store_errors: u32,
    /// For each sent push, how long after its `scheduledAt` it left, in milliseconds.
    pub lateness_ms: Vec<i64>,
}

impl RunReport {
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

/// The dispatcher's ports and settings. Cheap to clone; build one per run or keep one.
#[derive(Clone)]
pub struct Dispatcher {
    store: Arc<dyn Store>,
    push: Arc<dyn PushSender>,
    clock: Arc<dyn Clock>,
    settings: DispatchConfig,
    /// Salt of the device hashes in logs.
    salt: String,
    in_flight: InFlight,
}

impl Dispatcher {
    pub fn new(
        store: Arc<dyn Store>,
        push: Arc<dyn PushSender>,
        clock: Arc<dyn Clock>,
        settings: DispatchConfig,
        salt: impl Into<String>,
    ) -> Dispatcher {
        Dispatcher {
            store,
            push,
            clock,
            settings,
            salt: salt.into(),
            in_flight: InFlight::default(),
        }
    }

    /// Runs of dispatchers that share an [`InFlight`] leave each other's calls alone (a
    /// process's overlapping runs). Runs in different processes do not know of each other;
    /// there the claim keeps each call to one push.
    pub fn sharing(mut self, in_flight: InFlight) -> Dispatcher {
        self.in_flight = in_flight;
        self
    }

    pub fn settings(&self) -> &DispatchConfig {
        &self.settings
    }

    /// One run: returns when every reservation due before the window's end has been handled.
    pub async fn run(&self, cause: RunCause) -> RunReport {
        let started = self.clock.now();
        let run = Arc::new(Run::new(self.clone(), cause, started));
        tracing::info!(
            cause = cause.as_str(),
            window_end = rfc3339_millis(run.end),
            "dispatch run started"
        );
        let mut known = HashSet::new();
        let mut pending = Pending::default();
        let mut tasks = JoinSet::new();
        run.select(
            started - run.grace - MISSED_LOOKBACK,
            &mut known,
            &mut pending,
        )
        .await;
        let every = chrono_duration(self.settings.reselect_every.max(MIN_RESELECT));
        let mut tick = started + every;
        loop {
            run.start_due(&mut pending, &mut tasks);
            let next_start = pending.next_start();
            let wake = match (tick < run.end, next_start) {
                (true, Some(start)) => tick.min(start),
                (true, None) => tick,
                (false, Some(start)) => start,
                (false, None) => break,
            };
            wait_until(self.clock.as_ref(), wake).await;
            if tick < run.end && self.clock.now() >= tick {
                run.select(self.clock.now(), &mut known, &mut pending).await;
                tick += every;
            }
        }
        while let Some(joined) = tasks.join_next().await {
            if let Err(e) = joined {
                tracing::error!(error = %e, "dispatch task failed");
            }
        }
        let report = run.report.lock().unwrap_or_else(|p| p.into_inner()).clone();
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
            tokens_removed = report.tokens_removed,
            store_errors = report.store_errors,
            max_late_ms = report.max_lateness_ms(),
            p50_late_ms = report.lateness_percentile(50),
            p99_late_ms = report.lateness_percentile(99),
            "dispatch run finished"
        );
        metrics::emit(&report, self.clock.now());
        report
    }
}

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).expect("configured durations are small")
}

/// Returns once the clock reads `at` or later (never early, whatever the clock's sleep does).
async fn wait_until(clock: &dyn Clock, at: DateTime<Utc>) {
    while clock.now() < at {
        clock.sleep_until(at).await;
    }
}

/// How a push attempt series ended.
enum Delivery {
    /// Accepted by APNs at this time.
    Sent(DateTime<Utc>),
    NotSent(PushError),
}

/// One run's state, shared by its tasks.
struct Run {
    dispatcher: Dispatcher,
    grace: chrono::Duration,
    claim_timeout: chrono::Duration,
    claim_lead: chrono::Duration,
    push_budget: chrono::Duration,
    end: DateTime<Utc>,
    limit: Semaphore,
    report: Mutex<RunReport>,
}

impl Run {
    fn new(dispatcher: Dispatcher, cause: RunCause, started: DateTime<Utc>) -> Run {
        let s = &dispatcher.settings;
        Run {
            grace: chrono_duration(s.grace),
            claim_timeout: chrono_duration(s.claim_timeout),
            claim_lead: chrono_duration(s.claim_lead),
            push_budget: chrono_duration(s.push_budget),
            end: started + chrono_duration(s.window),
            limit: Semaphore::new(s.concurrency.max(1)),
            report: Mutex::new(RunReport {
                cause: cause.as_str(),
                ..RunReport::default()
            }),
            dispatcher,
        }
    }

    fn tally(&self, update: impl FnOnce(&mut RunReport)) {
        update(&mut self.report.lock().unwrap_or_else(|p| p.into_inner()));
    }

    async fn permit(&self) -> SemaphorePermit<'_> {
        self.limit
            .acquire()
            .await
            .expect("the semaphore is never closed")
    }

    fn clock(&self) -> &dyn Clock {
        self.dispatcher.clock.as_ref()
    }

    fn device_hash(&self, r: &Reservation) -> String {
        r.device_id.log_hash(&self.dispatcher.salt)
    }

    /// Queries every minute bucket from `from`'s to the window's end and takes on what is new.
    async fn select(
        self: &Arc<Self>,
        from: DateTime<Utc>,
        known: &mut HashSet<CallId>,
        pending: &mut Pending,
    ) {
        let now = self.clock().now();
        for minute in buckets(from, self.end) {
            let due = match self.dispatcher.store.due_reservations(&minute).await {
                Ok(due) => due,
                Err(e) => {
                    self.tally(|t| t.store_errors += 1);
                    tracing::error!(error = %e, minute, "dispatch selection failed");
                    continue;
                }
            };
            self.tally(|t| t.queries += 1);
            for reservation in due {
                self.take_on(reservation, now, known, pending);
            }
        }
    }

    fn take_on(
        &self,
        r: Reservation,
        now: DateTime<Utc>,
        known: &mut HashSet<CallId>,
        pending: &mut Pending,
    ) {
        let at = r.scheduled_at.utc();
        if known.contains(&r.call_id) || at >= self.end {
            return;
        }
        // A fresh claim belongs to a live run; it is looked at again if it is still there later.
        let abandoned_before = now - self.claim_timeout;
        if r.status == ReservationStatus::Claimed
            && r.claimed_at.is_none_or(|c| c >= abandoned_before)
        {
            return;
        }
        // Another run of this process has it (and would win its claim anyway). Not `known`:
        // should that run give it up, a re-selection here takes it on.
        let Some(held) = self.dispatcher.in_flight.take(&r.call_id) else {
            return;
        };
        known.insert(r.call_id.clone());
        self.tally(|t| t.selected += 1);
        let task = if at < now - self.grace {
            Task::Miss
        } else {
            Task::Deliver
        };
        let start = at - self.claim_lead - DEVICE_READ_LEAD - TASK_LEAD;
        pending.add(start, task, r, held);
    }

    /// Gives every pending reservation whose start has come its task.
    fn start_due(self: &Arc<Self>, pending: &mut Pending, tasks: &mut JoinSet<()>) {
        for (task, r, held) in pending.take_until(self.clock().now()) {
            let run = self.clone();
            tasks.spawn(async move {
                match task {
                    Task::Miss => run.miss(&r).await,
                    Task::Deliver => run.deliver(r).await,
                }
                drop(held);
            });
        }
    }

    /// Claim a moment before the second, push at the second, record the outcome.
    async fn deliver(self: Arc<Self>, r: Reservation) {
        let at = r.scheduled_at.utc();
        // The token is read ahead of the claim, so that only the claim (one write) has to fit
        // in the claim lead, however many calls share the second.
        wait_until(self.clock(), at - self.claim_lead - DEVICE_READ_LEAD).await;
        let device = {
            let _permit = self.permit().await;
            match self.dispatcher.store.get_device(&r.device_id).await {
                Ok(device) => device,
                Err(e) => {
                    // Not claimed: still `scheduled`, so an overlapping or later run sends it.
                    self.tally(|t| t.store_errors += 1);
                    tracing::error!(error = %e, call_id = r.call_id.as_str(), "dispatch device read failed");
                    return;
                }
            }
        };
        wait_until(self.clock(), at - self.claim_lead).await;
        let claimed_at = {
            let _permit = self.permit().await;
            let now = self.clock().now();
            if at < now - self.grace {
                // Only if this run fell far behind: too late to ring.
                return self.miss(&r).await;
            }
            let claim = self
                .dispatcher
                .store
                .claim_reservation(&r.device_id, &r.call_id, now, now - self.claim_timeout)
                .await;
            match claim {
                Ok(true) => self.tally(|t| t.claimed += 1),
                Ok(false) => {
                    self.tally(|t| t.lost += 1);
                    tracing::info!(
                        call_id = r.call_id.as_str(),
                        device = self.device_hash(&r),
                        "dispatch claim refused (cancelled, or another run has it)"
                    );
                    return;
                }
                Err(e) => {
                    self.tally(|t| t.store_errors += 1);
                    tracing::error!(error = %e, call_id = r.call_id.as_str(), "dispatch claim failed");
                    return;
                }
            }
            now
        };

        wait_until(self.clock(), at).await;
        let _permit = self.permit().await;
        let start = self.clock().now();
        if start - claimed_at >= self.claim_timeout / 2 {
            // Another run may soon count this claim as abandoned and send it: leave it to that
            // run rather than risk two pushes.
            self.tally(|t| t.abandoned += 1);
            tracing::warn!(
                call_id = r.call_id.as_str(),
                held_ms = (start - claimed_at).num_milliseconds(),
                "dispatch claim held too long; left to a later run"
            );
            return;
        }
        let Some(device) = device else {
            self.fail(&r, None, 0, "the device is no longer registered")
                .await;
            return;
        };
        let (delivery, attempts) = self.push_within_budget(&r, &device, at, start).await;
        match delivery {
            Delivery::Sent(sent_at) => {
                let late_ms = (sent_at - at).num_milliseconds();
                // Counted as sent even if recording it fails: the push went out.
                self.tally(|t| {
                    t.sent += 1;
                    t.lateness_ms.push(late_ms);
                });
                self.finish(&r, Outcome::Sent).await;
                tracing::info!(
                    call_id = r.call_id.as_str(),
                    device = self.device_hash(&r),
                    outcome = "sent",
                    late_ms,
                    attempts,
                    "dispatch push"
                );
            }
            Delivery::NotSent(error) => {
                if let PushError::InvalidToken { .. } = error {
                    match self
                        .dispatcher
                        .store
                        .remove_device(&device.device_id, &device.voip_token)
                        .await
                    {
                        Ok(true) => self.tally(|t| t.tokens_removed += 1),
                        Ok(false) => {} // a newer token was registered meanwhile: keep it
                        Err(e) => {
                            self.tally(|t| t.store_errors += 1);
                            tracing::error!(error = %e, "dispatch could not remove an invalid token");
                        }
                    }
                }
                self.fail(&r, error.status(), attempts, error.reason())
                    .await;
            }
        }
    }

    /// Pushes, retrying what is worth retrying with backoff, until `budget` after the later of
    /// the second and `start`. Each attempt is cut off at that deadline too.
    async fn push_within_budget(
        &self,
        r: &Reservation,
        device: &Device,
        at: DateTime<Utc>,
        start: DateTime<Utc>,
    ) -> (Delivery, u32) {
        let deadline = at.max(start) + self.push_budget;
        let mut backoff = FIRST_BACKOFF;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let now = self.clock().now();
            let push = VoipPush::for_reservation(r, now);
            let result = tokio::select! {
                result = self.dispatcher.push.send(&push, device) => result,
                () = wait_until(self.clock(), deadline) => Err(PushError::Retryable {
                    status: None,
                    reason: "no answer within the push budget".into(),
                }),
            };
            let error = match result {
                Ok(()) => return (Delivery::Sent(now), attempts),
                Err(error) => error,
            };
            let jitter =
                chrono::Duration::milliseconds(fastrand::i64(0..=backoff.num_milliseconds() / 2));
            let retry_at = self.clock().now() + backoff + jitter;
            if !matches!(error, PushError::Retryable { .. }) || retry_at >= deadline {
                return (Delivery::NotSent(error), attempts);
            }
            tracing::info!(
                call_id = r.call_id.as_str(),
                status = error.status(),
                reason = error.reason(),
                attempts,
                "dispatch push retried"
            );
            wait_until(self.clock(), retry_at).await;
            backoff = backoff * 2;
        }
    }

    async fn fail(&self, r: &Reservation, status: Option<u16>, attempts: u32, reason: &str) {
        if self.finish(r, Outcome::Failed).await {
            self.tally(|t| t.failed += 1);
        }
        tracing::warn!(
            call_id = r.call_id.as_str(),
            device = self.device_hash(r),
            outcome = "failed",
            status,
            reason,
            attempts,
            "dispatch push"
        );
    }

    async fn miss(&self, r: &Reservation) {
        if self.finish(r, Outcome::Missed).await {
            self.tally(|t| t.missed += 1);
            let late_ms = (self.clock().now() - r.scheduled_at.utc()).num_milliseconds();
            tracing::warn!(
                call_id = r.call_id.as_str(),
                device = self.device_hash(r),
                outcome = "missed",
                late_ms,
                "dispatch push"
            );
        }
    }

    /// Records the outcome; `false` if the record had changed meanwhile or the write failed.
    async fn finish(&self, r: &Reservation, outcome: Outcome) -> bool {
        let now = self.clock().now();
        let result = self
            .dispatcher
            .store
            .finish_reservation(
                &r.device_id,
                &r.call_id,
                outcome,
                now,
                now - self.claim_timeout,
            )
            .await;
        match result {
            Ok(true) => true,
            Ok(false) => {
                tracing::warn!(
                    call_id = r.call_id.as_str(),
                    outcome = outcome.status().as_str(),
                    "dispatch outcome not recorded: the reservation changed meanwhile"
                );
                false
            }
            Err(e) => {
                self.tally(|t| t.store_errors += 1);
                tracing::error!(
                    error = %e,
                    call_id = r.call_id.as_str(),
                    outcome = outcome.status().as_str(),
                    "dispatch outcome not recorded (a later run may send it again)"
                );
                false
            }
        }
    }
}

/// The minute buckets whose minute overlaps `[from, until)`, oldest first.
pub fn buckets(from: DateTime<Utc>, until: DateTime<Utc>) -> Vec<String> {
    let first = from.timestamp().div_euclid(60) * 60;
    let mut minute = DateTime::from_timestamp(first, 0).expect("a representable minute");
    let mut out = Vec::new();
    while minute < until {
        out.push(minute_bucket(minute));
        minute += chrono::Duration::minutes(1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn pending_hands_out_what_has_started_in_start_order_and_keeps_the_rest() {
        let r = |i: u32| {
            Reservation::new(
                crate::domain::device::DeviceId::parse(
                    "deviceId",
                    &format!("{i:08}-0000-4000-8000-000000000000"),
                )
                .unwrap(),
                crate::domain::reservation::ScheduledAt::from_stored(
                    t("2026-01-01T00:01:00Z").fixed_offset(),
                ),
                None,
                t("2026-01-01T00:00:00Z"),
            )
        };
        let in_flight = InFlight::default();
        let mut pending = Pending::default();
        assert_eq!(pending.next_start(), None);
        for (start, task, i) in [
            ("2026-01-01T00:00:20Z", Task::Deliver, 3),
            ("2026-01-01T00:00:10Z", Task::Deliver, 1),
            ("2026-01-01T00:00:10Z", Task::Miss, 2),
            ("2026-01-01T00:00:30Z", Task::Deliver, 4),
        ] {
            let r = r(i);
            let held = in_flight.take(&r.call_id).expect("free");
            pending.add(t(start), task, r, held);
        }
        assert_eq!(in_flight.len(), 4);
        assert_eq!(pending.next_start(), Some(t("2026-01-01T00:00:10Z")));
        assert!(pending.take_until(t("2026-01-01T00:00:09.999Z")).is_empty());
        let ids = |v: Vec<(Task, Reservation, Held)>| -> Vec<String> {
            v.into_iter()
                .map(|(_, r, _)| r.device_id.as_str()[..8].to_string())
                .collect()
        };
        assert_eq!(
            ids(pending.take_until(t("2026-01-01T00:00:20Z"))),
            vec!["00000001", "00000002", "00000003"],
            "a start exactly at `now` is due"
        );
        assert_eq!(pending.next_start(), Some(t("2026-01-01T00:00:30Z")));
        assert_eq!(
            in_flight.len(),
            1,
            "handed-out entries released once dropped"
        );
        assert_eq!(
            ids(pending.take_until(t("2026-01-01T00:05:00Z"))),
            vec!["00000004"]
        );
        assert_eq!(pending.next_start(), None);
        assert!(in_flight.is_empty());
    }

    #[test]
    fn a_call_is_held_by_one_run_at_a_time_and_free_again_when_released() {
        let shared = InFlight::default();
        let other = shared.clone();
        let call = CallId::generate();
        let held = shared.take(&call).expect("free");
        assert!(other.take(&call).is_none(), "held by the first run");
        assert!(
            InFlight::default().take(&call).is_some(),
            "another process's runs know nothing of it"
        );
        drop(held);
        assert!(other.take(&call).is_some(), "free once released");
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
}
