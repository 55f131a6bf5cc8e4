//! A run ends as soon as nothing is due in its window, and a reservation made after it wakes a
//! run (`koe::dispatch::wake`), on both stores, in the manual-clock [`World`]. The schedule is
//! simulated (a run at every minute, as the deployed rule starts one); the wake goes to a
//! stand-in of what the create calls (in a Lambda, an EventBridge event that the stack's rule
//! delivers to the dispatch function): it starts a run with cause `wake`, or loses the event,
//! or refuses it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use koe::dispatch::trigger::{DispatchTrigger, TriggerError};
use koe::dispatch::wake::{Wake, wake_for};
use koe::dispatch::{Dispatcher, RunCause, RunReport};
use koe::domain::device::PushEnvironment;
use koe::domain::reservation::{Reservation, ReservationStatus, minute_bucket};
use koe::platform::clock::Clock;
use koe::platform::metrics::catalogue::DISPATCH;
use koe::platform::metrics::{MemorySink, Metrics};
use koe_testkit::emf;
use tokio::task::JoinHandle;

use crate::dispatch_world::{DynStore, PATIENCE, World, at, t0};

type Runs = Arc<Mutex<Vec<JoinHandle<RunReport>>>>;

/// What becomes of a wake.
#[derive(Clone, Copy)]
enum Fate {
    /// The rule invokes the dispatch function: a run starts.
    Delivered,
    /// Handed on, then lost (an event the rule never delivers, a throttled invocation).
    Lost,
    /// Refused (EventBridge down): the create learns it.
    Refused,
}

/// The stand-in of the bus and its rule.
struct StandInBus {
    dispatcher: Dispatcher,
    fate: Fate,
    wakes: AtomicUsize,
    runs: Runs,
}

#[async_trait]
impl DispatchTrigger for StandInBus {
    async fn request_run(&self) -> Result<(), TriggerError> {
        Err(TriggerError("only wakes here".into()))
    }

    async fn wake(&self, _due_at: DateTime<Utc>, until: DateTime<Utc>) -> Result<(), TriggerError> {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        match self.fate {
            Fate::Delivered => {
                let dispatcher = self.dispatcher.clone();
                let run = tokio::spawn(async move { dispatcher.woken(until).await });
                self.runs.lock().unwrap().push(run);
                Ok(())
            }
            Fate::Lost => Ok(()),
            Fate::Refused => Err(TriggerError("EventBridge: service unavailable".into())),
        }
    }
}

/// The world, its metrics, the bus, and every run started (by the schedule or a wake).
struct Stack {
    w: World,
    sink: MemorySink,
    bus: StandInBus,
    runs: Runs,
}

impl Stack {
    fn new(store: DynStore, fate: Fate) -> Stack {
        let w = World::new(store);
        let sink = MemorySink::default();
        let runs: Runs = Arc::default();
        let bus = StandInBus {
            dispatcher: Stack::dispatcher_of(&w, &sink),
            fate,
            wakes: AtomicUsize::new(0),
            runs: runs.clone(),
        };
        Stack { w, sink, bus, runs }
    }

    /// One invocation's dispatcher (its own process: nothing in flight shared).
    fn dispatcher_of(w: &World, sink: &MemorySink) -> Dispatcher {
        w.dispatcher()
            .measured_by(Metrics::new(Arc::new(sink.clone()), "koe-dispatch"))
    }

    /// The every-minute schedule from now on: a run at each minute, the first one now.
    fn schedule(&self) -> JoinHandle<()> {
        let (clock, runs) = (self.w.clock.clone(), self.runs.clone());
        let dispatcher = Stack::dispatcher_of(&self.w, &self.sink);
        tokio::spawn(async move {
            let mut next = clock.now();
            loop {
                while clock.now() < next {
                    clock.sleep_until(next).await;
                }
                let dispatcher = dispatcher.clone();
                let run = tokio::spawn(async move { dispatcher.run(RunCause::Schedule).await });
                runs.lock().unwrap().push(run);
                next += Duration::minutes(1);
            }
        })
    }

    /// A reservation made now for `due` through the create's wake, as `POST /calls` makes it.
    async fn create(&self, name: &str, due: DateTime<Utc>) -> (Reservation, Wake) {
        let device = self.w.device(name, PushEnvironment::Production).await;
        let r = self.w.reserve(&device, due).await;
        let now = self.w.clock.now();
        let wake = wake_for(self.w.store.as_ref(), &self.bus, &r.call_id, now, due).await;
        (r, wake)
    }

    /// Walks to `until` and collects every run's report (all must have ended by then).
    async fn reports(&self, until: DateTime<Utc>) -> Vec<RunReport> {
        let runs: Vec<_> = std::mem::take(&mut *self.runs.lock().unwrap());
        self.w.finish(runs, until).await
    }

    fn pushes_of(&self, r: &Reservation) -> usize {
        let call = r.call_id.as_str();
        self.w
            .push
            .sent()
            .iter()
            .filter(|p| p.call_id == call)
            .count()
    }
}

async fn an_idle_run_is_one_selection_and_an_exit(store: DynStore) {
    let w = World::new(store);
    let report = tokio::time::timeout(PATIENCE, w.start_run())
        .await
        .expect("an idle run ends without the clock moving")
        .unwrap();
    assert_eq!(report.duration_ms, 0, "{report:?}");
    assert_eq!(report.selected, 0);
    // The counts and shards 0 of the 9 minutes from grace + 5 min back to the window's end,
    // nothing more.
    assert_eq!(report.queries, 2 * 9, "{report:?}");
    // No watch: a create's claim of a wake for any second succeeds.
    let minute = minute_bucket(t0());
    assert!(
        w.store
            .claim_wake(&minute, at(1), t0(), "probe-idle")
            .await
            .unwrap()
    );
}

async fn a_run_stays_until_its_last_call_and_promises_to_watch_until_then(store: DynStore) {
    let w = World::new(store);
    let device = w.device("stay", PushEnvironment::Production).await;
    let r = w.reserve(&device, at(40)).await;
    let run = w.start_run();
    let minute = minute_bucket(t0());
    let deadline = std::time::Instant::now() + PATIENCE;
    // The watch reaches 00:00:40 (a claim of a wake for then is refused), and no further.
    while w
        .store
        .claim_wake(
            &minute,
            at(40),
            t0(),
            &format!("probe-{}", fastrand::u64(..)),
        )
        .await
        .unwrap()
    {
        assert!(std::time::Instant::now() < deadline, "no watch of {minute}");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let just_after = at(40) + Duration::milliseconds(1);
    assert!(
        w.store
            .claim_wake(&minute, just_after, t0(), "probe-after")
            .await
            .unwrap()
    );
    w.expect_push_at_its_second(&r).await;
    let [report] = w.finish(vec![run], at(41)).await.try_into().unwrap();
    assert_eq!(report.sent, 1);
    assert!(
        report.duration_ms <= 41_000,
        "ends after its last call: {report:?}"
    );
}

async fn a_call_made_after_the_minutes_run_ended_rings_at_its_second(store: DynStore) {
    let s = Stack::new(store, Fate::Delivered);
    let schedule = s.schedule();
    // The 00:00 run finds nothing and ends; the calls are made at 20 s, 10 to 70 s ahead.
    s.w.step_to(at(20)).await;
    let mut made = Vec::new();
    for lead in [10, 30, 45, 70] {
        made.push(s.create(&format!("wake-{lead}"), at(20 + lead)).await);
    }
    let wakes: Vec<&Wake> = made.iter().map(|(_, wake)| wake).collect();
    // The first create claims the wake of 00:00 (its run stays until 00:01:15, the gap's end),
    // so the second finds it claimed; 00:01:05 is another minute's: watched once the woken run
    // has promised both (it selects concurrently), else claimed and woken apart; the last is
    // the 00:01 run's (due after 00:01:15).
    assert_eq!(
        (wakes[0], wakes[1], wakes[3]),
        (&Wake::Sent, &Wake::Watched, &Wake::NotNeeded)
    );
    assert!(matches!(wakes[2], Wake::Sent | Wake::Watched), "{wakes:?}");
    let sent = wakes.iter().filter(|w| ***w == Wake::Sent).count();
    for (r, _) in &made {
        s.w.expect_push_at_its_second(r).await;
    }
    let reports = s.reports(at(95)).await;
    schedule.abort();
    for (r, _) in &made {
        assert_eq!(s.pushes_of(r), 1, "{}", r.call_id.as_str());
    }
    let woken = reports.iter().filter(|r| r.cause == "wake").count();
    assert_eq!(woken, sent, "{reports:?}");
    assert_eq!(s.bus.wakes.load(Ordering::SeqCst), sent);
    let lateness = emf::values(&emf::parse_all(&s.sink.lines()), DISPATCH, "PushLateness");
    assert_eq!(lateness, [0.0; 4]);
}

async fn creates_at_once_wake_one_run_and_every_call_rings_at_its_second(store: DynStore) {
    let s = Stack::new(store, Fate::Delivered);
    let schedule = s.schedule();
    s.w.step_to(at(20)).await;
    let names: Vec<String> = (0..20).map(|i| format!("burst-{i}")).collect();
    let made = futures_util::future::join_all(
        names
            .iter()
            .zip(30..)
            .map(|(name, second)| s.create(name, at(second))),
    )
    .await;
    let sent = made.iter().filter(|(_, w)| *w == Wake::Sent).count();
    let watched = made.iter().filter(|(_, w)| *w == Wake::Watched).count();
    assert_eq!(
        (sent, watched),
        (1, 19),
        "one claim of the minute's wake: {made:?}"
    );
    for (r, _) in &made {
        s.w.expect_push_at_its_second(r).await;
    }
    let reports = s.reports(at(80)).await;
    schedule.abort();
    assert_eq!(reports.iter().filter(|r| r.cause == "wake").count(), 1);
    for (r, _) in &made {
        assert_eq!(s.pushes_of(r), 1, "{}", r.call_id.as_str());
    }
}

async fn a_lost_wake_costs_lateness_within_grace_never_the_call(store: DynStore) {
    late_within_grace(store, Fate::Lost).await;
}

async fn a_refused_wake_costs_lateness_within_grace_never_the_call(store: DynStore) {
    late_within_grace(store, Fate::Refused).await;
}

/// A call due at 00:00:50, made at 00:00:20, whose wake never starts a run.
async fn late_within_grace(store: DynStore, fate: Fate) {
    let s = Stack::new(store, fate);
    let schedule = s.schedule();
    s.w.step_to(at(20)).await;
    let (r, wake) = s.create("late", at(50)).await;
    match fate {
        Fate::Lost => assert_eq!(wake, Wake::Sent),
        _ => assert!(matches!(wake, Wake::Failed(_)), "{wake:?}"),
    }
    // Nobody takes it at its second: the 00:01 run sends it, 10 s late, once.
    s.w.step_to(at(59)).await;
    assert_eq!(s.pushes_of(&r), 0);
    s.w.step_to(at(61)).await;
    s.w.wait_status(&r, ReservationStatus::Sent).await;
    let reports = s.reports(at(62)).await;
    schedule.abort();
    assert_eq!(s.pushes_of(&r), 1);
    let sent: Vec<&RunReport> = reports.iter().filter(|r| r.sent == 1).collect();
    assert_eq!(sent.len(), 1, "{reports:?}");
    assert!(sent[0].lateness_ms[0] >= 10_000, "{:?}", sent[0]);
    let lines = emf::parse_all(&s.sink.lines());
    let lateness = emf::values(&lines, DISPATCH, "PushLateness");
    assert_eq!(lateness.len(), 1);
    assert!(lateness[0] >= 10_000.0, "the metrics show it: {lateness:?}");
}

async fn a_run_that_watches_the_minute_spares_the_wake(store: DynStore) {
    let s = Stack::new(store, Fate::Delivered);
    let anchor =
        s.w.device("watched-anchor", PushEnvironment::Production)
            .await;
    let anchored = s.w.reserve(&anchor, at(50)).await;
    let schedule = s.schedule();
    s.w.step_to(at(20)).await;
    let (r, wake) = s.create("watched", at(40)).await;
    assert_eq!(wake, Wake::Watched);
    s.w.expect_push_at_its_second(&r).await;
    s.w.expect_push_at_its_second(&anchored).await;
    let reports = s.reports(at(61)).await;
    schedule.abort();
    assert_eq!(s.bus.wakes.load(Ordering::SeqCst), 0);
    assert_eq!(s.pushes_of(&r), 1);
    assert!(reports.iter().all(|r| r.cause == "schedule"), "{reports:?}");
}

on_each_store!(;
    multi_thread: an_idle_run_is_one_selection_and_an_exit,
    a_run_stays_until_its_last_call_and_promises_to_watch_until_then,
    a_call_made_after_the_minutes_run_ended_rings_at_its_second,
    creates_at_once_wake_one_run_and_every_call_rings_at_its_second,
    a_lost_wake_costs_lateness_within_grace_never_the_call,
    a_refused_wake_costs_lateness_within_grace_never_the_call,
    a_run_that_watches_the_minute_spares_the_wake,
);
