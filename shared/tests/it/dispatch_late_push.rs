//! A push leaves only while its run's claim is surely its own (SPEC, "What is refused or
//! cancelled leaves nothing behind"): a call whose push (and its batch's mark) waits for a place
//! past the claim timeout, while another run fences its batch and sends it, is never pushed by
//! the first run; one that waits past the safe bound alone is given back, and a later run
//! sends it.
//!
//! The embedded store and a manual clock. The first run has one place (`concurrency` 1) and a
//! 60 s push budget, and the push of call A, due at 15 s, hangs: A holds the only place while
//! B, due 100 ms later, claimed, waits for it at its second. (Deployed, the wait
//! comes from a crowded second: thousands of calls ahead of B, each holding a place up to the
//! 1 s budget.)

use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use chrono::{DateTime, Duration, FixedOffset, Utc};
use koe::dispatch::{Dispatcher, RunCause, RunReport};
use koe::domain::reservation::{Reservation, ReservationStatus};
use koe::platform::clock::Clock;
use koe::platform::config::{Config, DispatchConfig, Vars};
use koe::store::memory::MemoryStore;
use koe::store::prelude::*;
use koe_testkit::clock::ManualClock;
use koe_testkit::dispatching::reserve_at;
use koe_testkit::push::{RecordingPushSender, Scripted};
use tokio::task::JoinHandle;

const PATIENCE: StdDuration = StdDuration::from_secs(15);

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2035-03-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn at_ms(ms: i64) -> DateTime<Utc> {
    t0() + Duration::milliseconds(ms)
}

struct World {
    store: Arc<dyn Store>,
    clock: Arc<ManualClock>,
}

impl World {
    fn new() -> World {
        World {
            store: Arc::new(MemoryStore::new()),
            clock: Arc::new(ManualClock::at(t0())),
        }
    }

    fn push_sender(&self) -> Arc<RecordingPushSender> {
        Arc::new(RecordingPushSender::new(self.clock.clone()))
    }

    /// A run at the clock's time through `push`, with `settings`.
    fn start_run(
        &self,
        push: &Arc<RecordingPushSender>,
        settings: DispatchConfig,
    ) -> JoinHandle<RunReport> {
        let dispatcher = Dispatcher::new(
            self.store.clone(),
            push.clone(),
            self.clock.clone(),
            settings,
            "test-salt",
        );
        tokio::spawn(async move { dispatcher.run(RunCause::Local).await })
    }

    async fn reserve(&self, name: &str, when: DateTime<Utc>) -> Reservation {
        let jst = FixedOffset::east_opt(9 * 3600).unwrap();
        let token = format!("{:064x}", fastrand::u128(..));
        let now = self.clock.now();
        reserve_at(&*self.store, name, &token, when.with_timezone(&jst), now).await
    }

    /// Walks the clock to `t` in 100 ms steps, letting woken tasks run after each.
    async fn step_to(&self, t: DateTime<Utc>) {
        while self.clock.now() < t {
            let next = (self.clock.now() + Duration::milliseconds(100)).min(t);
            self.clock.set(next);
            tokio::time::sleep(StdDuration::from_millis(2)).await;
        }
    }

    async fn stored(&self, r: &Reservation) -> Reservation {
        self.store
            .get_reservation(&r.device_id, self.clock.now())
            .await
            .unwrap()
            .expect("the reservation")
    }

    /// Waits (real time, the clock held) until `r` is stored with `status`.
    async fn wait_until(&self, r: &Reservation, what: &str, status: ReservationStatus) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let stored = self.stored(r).await;
            if stored.status == status {
                return;
            }
            assert!(Instant::now() < deadline, "never {what}: {stored:?}");
            tokio::time::sleep(StdDuration::from_millis(2)).await;
        }
    }

    async fn join(&self, run: JoinHandle<RunReport>) -> RunReport {
        tokio::time::timeout(PATIENCE, run).await.unwrap().unwrap()
    }
}

fn settings() -> DispatchConfig {
    Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch
}

/// One place, and pushes that may take a minute: A's hung push keeps B waiting for its place.
fn one_place(push_budget_secs: u64) -> DispatchConfig {
    let mut s = settings();
    s.concurrency = 1;
    s.push_budget = StdDuration::from_secs(push_budget_secs);
    s
}

/// Calls A (15 s, its push hangs) and B (15.1 s), the first run (a push budget of `budget` s)
/// started at 0 s; returns once B, claimed by it, waits for the only place (its batch's mark
/// with it): the
/// world, the first run's push and another process's, B and the first run.
async fn b_waits_behind_a(
    budget: u64,
) -> (
    World,
    [Arc<RecordingPushSender>; 2],
    Reservation,
    JoinHandle<RunReport>,
) {
    let w = World::new();
    let (first, second) = (w.push_sender(), w.push_sender());
    let a = w.reserve("late-push-a", at_ms(15_000)).await;
    let b = w.reserve("late-push-b", at_ms(15_100)).await;
    first.script("late-push-a", [Scripted::Hang]);
    let run = w.start_run(&first, one_place(budget));
    w.step_to(at_ms(15_000)).await;
    first
        .wait_for("A's push", PATIENCE, |p| {
            p.iter().any(|p| p.call_id == a.call_id.as_str())
        })
        .await;
    w.step_to(at_ms(15_200)).await;
    let b_stored = w.stored(&b).await;
    assert_eq!(b_stored.status, ReservationStatus::Claimed);
    assert_eq!(
        (b_stored.mark_batch, b_stored.push_started_at),
        (Some(b.scheduled_at.utc()), None),
        "B's batch is not marked: its mark waits for the place too: {b_stored:?}"
    );
    (w, [first, second], b, run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_that_waited_past_the_claim_timeout_never_leaves() {
    let (w, [first, second], b, first_run) = b_waits_behind_a(60).await;

    // Past B's claim timeout (30 s) another process's run finds its claim abandoned, fences
    // its batch (not marked: the mark waited for the place too), and sends it; A's batch was
    // marked before its push hung, so A is recorded `failed`, push state unknown.
    w.step_to(at_ms(46_200)).await;
    let second_run = w.start_run(&second, settings());
    w.wait_until(&b, "sent by the second run", ReservationStatus::Sent)
        .await;

    // A's push is cut off after its budget and its answer's wait (77 s); B gets the place at
    // last, and its batch's mark is refused: fenced.
    w.step_to(at_ms(80_000)).await;
    let first_report = w.join(first_run).await;
    w.step_to(at_ms(117_000)).await;
    let second_report = w.join(second_run).await;

    let pushes_of_b = |p: &RecordingPushSender| {
        p.attempts()
            .iter()
            .filter(|p| p.call_id == b.call_id.as_str())
            .count()
    };
    assert_eq!(pushes_of_b(&first), 0, "the first run never pushes B");
    assert_eq!(pushes_of_b(&second), 1, "the run that took it over, once");
    assert_eq!(w.stored(&b).await.status, ReservationStatus::Sent);
    assert_eq!(
        (first_report.sent, first_report.lost, first_report.released),
        (0, 1, 0),
        "B not pushed: its batch fenced: {first_report:?}"
    );
    assert_eq!(
        (second_report.push_unknown, second_report.sent),
        (1, 1),
        "A and B: {second_report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_that_waited_past_the_safe_bound_is_given_back_and_sent_by_a_later_run() {
    // A's push is cut off at 37 s (its 20 s budget, then 2 s for its answer): B gets its
    // place 22.4 s after its claim (14.6 s), past half the claim timeout, though no other run
    // has touched it yet.
    let (w, [first, second], b, first_run) = b_waits_behind_a(20).await;
    w.step_to(at_ms(37_500)).await;
    w.wait_until(&b, "given back", ReservationStatus::Scheduled)
        .await;

    let second_run = w.start_run(&second, settings());
    w.wait_until(&b, "sent by the second run", ReservationStatus::Sent)
        .await;
    w.step_to(at_ms(106_000)).await;
    let first_report = w.join(first_run).await;
    let second_report = w.join(second_run).await;

    assert!(
        first
            .attempts()
            .iter()
            .all(|p| p.call_id != b.call_id.as_str()),
        "not pushed by the run that gave it back"
    );
    let sent = second.sent_for_call(b.call_id.as_str());
    assert_eq!(sent.len(), 1, "sent once, within grace: {sent:?}");
    assert_eq!(sent[0].at, at_ms(37_500), "at once");
    assert_eq!(first_report.released, 1, "{first_report:?}");
    assert_eq!(second_report.sent, 1, "{second_report:?}");
}
