//! Dispatch runs for devices that confirm their call pushes, with a short confirmation wait and
//! simulated phones (the memory store's on tokio's paused time, exact whatever the machine's
//! load; DynamoDB Local's on the real clock): confirmed at once → one push, `rang`; never → exactly
//! `CALL_MAX_PUSHES` pushes at least the wait apart, then `unconfirmed`; the second confirmed →
//! two pushes, `rang`; a device without `confirmsCalls` → one push, `sent`. A later run pushes
//! again when the run that pushed first ended. Both stores; DynamoDB Local also with lost
//! replies on the confirmation and the pushes' writes: no attempt ever pushed twice.
//!
//! On the real clock a busy machine may leave a run's window before its calls are done: runs
//! follow until every call has its final status ([`World::settle`]), so what is asserted (how
//! many pushes, which status, each attempt once, never before the wait) holds whatever the load;
//! when things happened is asserted on paused time only.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use koe::dispatch::{Dispatcher, RunCause, RunReport};
use koe::domain::device::{Device, DeviceId, PushEnvironment};
use koe::domain::reservation::{CallId, Reservation, ReservationStatus, ScheduledAt};
use koe::platform::clock::{Clock, SystemClock};
use koe::platform::config::{Config, DispatchConfig, Vars};
use koe::store::prelude::*;
use koe::store::{ClaimMark, ConfirmAnswer};
use koe_testkit::devices;
use koe_testkit::on_call::OnCall;
use koe_testkit::push::RecordingPushSender;

const WAIT: StdDuration = StdDuration::from_millis(400);

fn settings(window: StdDuration) -> DispatchConfig {
    let mut s = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    s.window = window;
    s.reselect_every = StdDuration::from_millis(300);
    s.confirm_wait = WAIT;
    s.max_pushes = 3;
    s
}

/// What a simulated phone does with the pushes of its call: confirm the one of this attempt
/// (`None`: never).
#[derive(Clone, Copy)]
struct Phone {
    confirms_attempt: Option<u64>,
}

/// A phone that confirms the push of `attempt` (`None`: never).
fn confirming(attempt: Option<u64>) -> Phone {
    Phone {
        confirms_attempt: attempt,
    }
}

struct World {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    timing: Timing,
    push: Arc<RecordingPushSender>,
    phones: HashMap<String, (DeviceId, Phone)>,
}

/// A store, the clock its runs, phones and pushes read, and whether that clock is tokio's
/// paused one (exact timing) or the real one.
type Setup = (Arc<dyn Store>, Arc<dyn Clock>, Timing);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Timing {
    Paused,
    Real,
}

/// Runs follow one another until every call is final; more than this many is a call stuck.
const MAX_RUNS: usize = 20;

/// The sum of one count over runs.
fn total(reports: &[RunReport], count: impl Fn(&RunReport) -> u32) -> u32 {
    reports.iter().map(count).sum()
}

impl World {
    fn new((store, clock, timing): Setup) -> World {
        World {
            store,
            push: Arc::new(RecordingPushSender::new(clock.clone())),
            clock,
            timing,
            phones: HashMap::new(),
        }
    }

    /// A device (confirming or not) with a call due `in_ms` from now.
    async fn call(&mut self, confirms: bool, phone: Phone, in_ms: i64) -> Reservation {
        let now = self.clock.now();
        let device = Device {
            confirms_calls: confirms,
            ..devices::device(&devices::random_id("c-"), PushEnvironment::Production, now)
        };
        self.store.put_device(&device).await.unwrap();
        let at = (now + Duration::milliseconds(in_ms)).fixed_offset();
        let r = Reservation::new(
            device.device_id.clone(),
            ScheduledAt::from_stored(at),
            None,
            now,
        );
        self.store
            .create_reservation(&r, now, now - Duration::minutes(5))
            .await
            .unwrap();
        self.phones
            .insert(r.call_id.as_str().to_owned(), (device.device_id, phone));
        r
    }

    /// The phones: each push is seen 50 ms after it left; a phone confirms the attempt it is
    /// told to (asking again while a push again is leaving), until `until`.
    fn start_phones(&self, until: DateTime<Utc>) -> tokio::task::JoinHandle<()> {
        let (store, push, phones) = (self.store.clone(), self.push.clone(), self.phones.clone());
        let clock = self.clock.clone();
        tokio::spawn(async move {
            let mut done = HashSet::new();
            while clock.now() < until {
                for p in push.sent() {
                    let attempt = p.payload["attempt"].as_u64().unwrap();
                    let Some((device, phone)) = phones.get(&p.call_id) else {
                        continue;
                    };
                    if phone.confirms_attempt != Some(attempt)
                        || clock.now() < p.at + Duration::milliseconds(50)
                        || !done.insert(p.call_id.clone())
                    {
                        continue;
                    }
                    let call = CallId::from_stored(p.call_id.clone());
                    while let Ok(ConfirmAnswer::PushInFlight) | Err(_) =
                        store.confirm_call(device, &call, clock.now()).await
                    {
                        tokio::time::sleep(StdDuration::from_millis(20)).await;
                    }
                }
                tokio::time::sleep(StdDuration::from_millis(10)).await;
            }
        })
    }

    async fn run(&self, window: StdDuration) -> RunReport {
        self.run_with(settings(window)).await
    }

    async fn run_with(&self, settings: DispatchConfig) -> RunReport {
        Dispatcher::new(
            self.store.clone(),
            self.push.clone(),
            self.clock.clone(),
            settings,
            "t",
        )
        .run(RunCause::Local)
        .await
    }

    /// Runs with `settings`, one after another, until every call of `calls` has its final
    /// status: on paused time the first run does it; on the real clock a busy machine may need
    /// more. Their reports, in order.
    async fn settle(&self, calls: &[&Reservation], settings: DispatchConfig) -> Vec<RunReport> {
        let mut reports = Vec::new();
        loop {
            reports.push(self.run_with(settings.clone()).await);
            let mut open = 0;
            for r in calls {
                open += usize::from(!self.stored(r).await.status.is_terminal());
            }
            if open == 0 {
                return reports;
            }
            assert!(
                reports.len() < MAX_RUNS,
                "{open} call(s) still open after {MAX_RUNS} runs: {reports:?}"
            );
            if self.timing == Timing::Paused {
                panic!("on paused time one run settles its calls: {reports:?}");
            }
        }
    }

    /// The accepted pushes of `r`'s call: their attempts and times, in order.
    fn pushes(&self, r: &Reservation) -> Vec<(u64, DateTime<Utc>)> {
        let mut pushes: Vec<_> = self
            .push
            .sent_for_call(r.call_id.as_str())
            .iter()
            .map(|p| (p.payload["attempt"].as_u64().unwrap(), p.at))
            .collect();
        pushes.sort_by_key(|(attempt, _)| *attempt);
        pushes
    }

    async fn stored(&self, r: &Reservation) -> Reservation {
        let held = self
            .store
            .get_reservation(&r.device_id, self.clock.now())
            .await;
        held.expect("get_reservation").expect("the reservation")
    }

    /// Never two pushes of one attempt, never a push after its call's confirmation was stored.
    async fn each_attempt_pushed_once(&self, r: &Reservation) {
        let pushes = self.pushes(r);
        let attempts: HashSet<u64> = pushes.iter().map(|(a, _)| *a).collect();
        assert_eq!(
            attempts.len(),
            pushes.len(),
            "an attempt pushed twice: {pushes:?}"
        );
        let stored = self.stored(r).await;
        if let Some(rang_at) = stored.rang_at {
            assert!(
                pushes.iter().all(|(_, at)| *at <= rang_at),
                "a push after the confirmation was stored: {pushes:?}, rang {rang_at}"
            );
        }
    }
}

async fn each_phone_gets_the_pushes_it_needs(setup: Setup) {
    let mut w = World::new(setup);
    let at_once = w.call(true, confirming(Some(1)), 1500).await;
    let never = w.call(true, confirming(None), 1500).await;
    let second = w.call(true, confirming(Some(2)), 1500).await;
    let plain = w.call(false, confirming(None), 1500).await;
    let phones = w.start_phones(w.clock.now() + Duration::minutes(10));
    let calls = [&at_once, &never, &second, &plain];
    let report = w
        .settle(&calls, settings(StdDuration::from_millis(4500)))
        .await;
    phones.abort();

    let expect = [
        (&at_once, 1, ReservationStatus::Rang),
        (&never, 3, ReservationStatus::Unconfirmed),
        (&second, 2, ReservationStatus::Rang),
        (&plain, 1, ReservationStatus::Sent),
    ];
    for (r, pushes, status) in expect {
        let stored = w.stored(r).await;
        assert_eq!(
            (w.pushes(r).len(), stored.status, stored.pushes),
            (pushes, status, pushes as u32),
            "{:?} {report:?}",
            w.pushes(r)
        );
        w.each_attempt_pushed_once(r).await;
    }
    let never_pushes = w.pushes(&never);
    for pair in never_pushes.windows(2) {
        assert!(
            pair[1].1 - pair[0].1 >= Duration::from_std(WAIT).unwrap(),
            "pushed again before the wait ended: {never_pushes:?}"
        );
    }
    assert!(w.stored(&at_once).await.rang_at.is_some());
    assert_eq!(
        (
            total(&report, |r| r.re_pushed),
            total(&report, |r| r.unconfirmed)
        ),
        (3, 1),
        "{report:?}"
    );
}

/// The run that pushed first ends (its window) before the wait does: a later run's selection
/// finds the call due again and pushes it (late, within grace), once per attempt.
async fn a_later_run_pushes_again(setup: Setup) {
    let mut w = World::new(setup);
    let never = w.call(true, confirming(None), 1100).await;
    // Ends 0.2 s after the call's second, before the wait after its push does (0.4 s).
    let window = never.scheduled_at.utc() + Duration::milliseconds(200) - w.clock.now();
    w.run(window.to_std().unwrap()).await;
    // Once on paused time; on a busy machine the run may end before it pushed at all, never
    // after it pushed twice (its window ends before the wait does).
    let first = w.pushes(&never).len();
    let expected = if w.timing == Timing::Paused {
        1..=1
    } else {
        0..=1
    };
    assert!(
        expected.contains(&first),
        "the first run pushed once: {:?} due {}",
        w.pushes(&never),
        never.scheduled_at.utc()
    );
    assert_eq!(w.stored(&never).await.pushes as usize, first);
    tokio::time::sleep(StdDuration::from_millis(600)).await;
    let later = w
        .settle(&[&never], settings(StdDuration::from_millis(2000)))
        .await;
    let pushes = w.pushes(&never);
    assert_eq!(pushes.len(), 3, "{pushes:?} {later:?}");
    assert_eq!(
        w.stored(&never).await.status,
        ReservationStatus::Unconfirmed
    );
    w.each_attempt_pushed_once(&never).await;
    assert!(total(&later, |r| r.re_pushed) >= 2, "{later:?}");
    assert!(later.iter().any(|r| r.lateness_ms.iter().any(|ms| *ms > 0)));
}

/// DynamoDB Local behind a proxy that loses replies (after the write happened) of the
/// confirmation and of the pushes' outcomes, and holds others back: each attempt still pushed
/// once, a confirmed call never pushed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_and_slow_replies_never_push_an_attempt_twice() {
    let world = koe_testkit::dispatching::ProxiedWorld::new().await;
    let mut w = World::new((world.store.clone(), Arc::new(SystemClock), Timing::Real));
    w.push = world.push.clone();
    let second = w.call(true, confirming(Some(2)), 1500).await;
    let never = w.call(true, confirming(None), 1500).await;
    world.dropper.drop_replies("UpdateItem", ":rang", 1);
    world.dropper.drop_replies("UpdateItem", ":nextAtMs", 2);
    world
        .dropper
        .hold_replies("UpdateItem", ":claimed", 2, StdDuration::from_millis(700));
    let phones = w.start_phones(w.clock.now() + Duration::minutes(10));
    let report = w
        .settle(&[&second, &never], settings(StdDuration::from_millis(5000)))
        .await;
    phones.abort();
    assert!(world.dropper.dropped() >= 3, "the faults happened");
    for (r, status) in [
        (&second, ReservationStatus::Rang),
        (&never, ReservationStatus::Unconfirmed),
    ] {
        w.each_attempt_pushed_once(r).await;
        assert_eq!(w.stored(r).await.status, status, "{report:?}");
    }
    assert_eq!(w.pushes(&second).len(), 2);
    assert_eq!(w.pushes(&never).len(), 3);
    koe_testkit::faults::record(
        "DynamoDB: replies lost of a confirmation and of pushes' outcomes, claims held 0.7 s",
        "each push attempt is made once; a confirmed call is never pushed again",
        "2 pushes then rang; 3 pushes then unconfirmed; no attempt twice",
    );
}

/// At `r`'s due time a run claims it (its push mark a write apart) and dies: its token, and the
/// time of its claim.
async fn claimed_by_a_run_that_dies(
    w: &World,
    r: &Reservation,
) -> (koe::domain::reservation::RunToken, DateTime<Utc>) {
    let store = &w.store;
    w.clock.sleep_until(r.scheduled_at.utc()).await;
    let dead = koe::domain::reservation::RunToken::generate();
    let now = w.clock.now();
    let abandoned = now - Duration::seconds(30);
    let claim = store
        .claim_due_for(r, &dead, now, abandoned, ClaimMark::Apart)
        .await
        .unwrap();
    assert!(matches!(claim, koe::store::ClaimAnswer::Won { pushes: 0 }));
    (dead, now)
}

/// The next run (its window `window`), started once a dead run's claim is abandoned (the
/// claim timeout, 1 s here), and as many more as `r` needs to be final: their reports.
async fn the_next_run(w: &World, r: &Reservation, window: StdDuration) -> Vec<RunReport> {
    tokio::time::sleep(StdDuration::from_millis(1200)).await;
    let mut s = settings(window);
    s.claim_timeout = StdDuration::from_secs(1);
    w.settle(&[r], s).await
}

/// The run that pushed first stops right after its push mark (its push may have left): once
/// its claim is abandoned, a later run counts that push and pushes again, attempt 2 then 3,
/// within grace, and the call ends `unconfirmed`.
async fn a_push_whose_run_died_goes_again(setup: Setup) {
    let mut w = World::new(setup);
    let never = w.call(true, confirming(None), 300).await;
    let (dead, now) = claimed_by_a_run_that_dies(&w, &never).await;
    assert!(
        w.store
            .mark_push_started(&never.device_id, &never.call_id, &dead, now, true)
            .await
            .unwrap()
    );
    let report = the_next_run(&w, &never, StdDuration::from_millis(3500)).await;
    let attempts: Vec<u64> = w.pushes(&never).iter().map(|(a, _)| *a).collect();
    assert_eq!(attempts, vec![2, 3], "{report:?}");
    let stored = w.stored(&never).await;
    assert_eq!(
        (stored.status, stored.pushes),
        (ReservationStatus::Unconfirmed, 3)
    );
    w.each_attempt_pushed_once(&never).await;
}

/// A device that confirms its calls: its claim and its push mark are two writes, and a run that
/// dies between them (claimed, unmarked) has not pushed. Once its claim is abandoned, a later
/// run re-claims it and pushes it, attempt 1, within grace; the phone confirms: `rang`, one
/// push. (A device without `confirmsCalls` is claimed in its batch, whose one mark is made at
/// the second: `dispatch_runs::exactly_once::a_run_that_died_after_claiming_in_its_batch_leaves_it_to_the_next_run`.)
async fn an_unmarked_claim_whose_run_died_is_pushed_by_a_later_run(setup: Setup) {
    let mut w = World::new(setup);
    let first = w.call(true, confirming(Some(1)), 300).await;
    let due = first.scheduled_at.utc();
    claimed_by_a_run_that_dies(&w, &first).await;
    let phones = w.start_phones(w.clock.now() + Duration::minutes(10));
    let report = the_next_run(&w, &first, StdDuration::from_millis(2500)).await;
    phones.abort();
    let pushes = w.pushes(&first);
    assert_eq!(pushes.len(), 1, "{pushes:?} {report:?}");
    assert_eq!(pushes[0].0, 1, "its first push");
    // Within grace it is: a call past it is `missed`, never pushed (asserted by its status).
    let late = (pushes[0].1 - due).num_milliseconds();
    assert!(late >= 0, "never early: {late} ms");
    assert_eq!(w.stored(&first).await.status, ReservationStatus::Rang);
    w.each_attempt_pushed_once(&first).await;
}

/// The run's window ends in the millisecond its call's last push leaves, before that push's wait
/// ends: it stays for the wait and records `unconfirmed` when it ends, not the schedule's next
/// run up to a minute later. Paused time: the first world measures when the last push leaves,
/// the second ends its run's window exactly then.
#[tokio::test(start_paused = true)]
async fn a_run_ending_as_the_last_push_leaves_records_unconfirmed_when_its_wait_ends() {
    let at = "2026-01-01T06:59:50Z".parse().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(koe_testkit::clock::TokioClock::at(at));
    let setup = || -> Setup {
        let store = Arc::new(koe::store::memory::MemoryStore::new());
        (store, clock.clone(), Timing::Paused)
    };
    let mut measure = World::new(setup());
    let started = measure.clock.now();
    let never = measure.call(true, confirming(None), 1500).await;
    measure.run(StdDuration::from_secs(10)).await;
    let last = measure.pushes(&never)[2].1 - started;
    // The same phase within the second as the first world's start (slots are planned per
    // second), so its pushes leave at the same offsets.
    let whole_seconds = (clock.now() - started).num_seconds() + 1;
    clock
        .sleep_until(started + Duration::seconds(whole_seconds))
        .await;

    let mut w = World::new(setup());
    let started = w.clock.now();
    let never = w.call(true, confirming(None), 1500).await;
    // The window ends 1 ms after the last push is due: that push is this run's, its wait is not.
    let window = last + Duration::milliseconds(1);
    let report = w.run(window.to_std().unwrap()).await;
    let pushes = w.pushes(&never);
    assert_eq!(pushes.len(), 3, "{pushes:?} {report:?}");
    assert_eq!(
        pushes[2].1 - started,
        last,
        "the last push leaves as the window ends"
    );
    let stored = w.stored(&never).await;
    assert_eq!(
        stored.status,
        ReservationStatus::Unconfirmed,
        "recorded by the run that pushed it: {report:?}"
    );
    let recorded_within = w.clock.now() - pushes[2].1;
    assert!(
        recorded_within <= Duration::from_std(WAIT).unwrap() + Duration::seconds(2),
        "`unconfirmed` {recorded_within} after the last push (its wait is {WAIT:?})"
    );
    assert_eq!(report.unconfirmed, 1, "{report:?}");
}

/// Each scenario on the memory store on paused time, and on DynamoDB Local on the real clock.
macro_rules! on_each_store_and_its_clock {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    let at = "2026-01-01T06:59:50Z".parse().unwrap();
                    let clock = std::sync::Arc::new(koe_testkit::clock::TokioClock::at(at));
                    let store = std::sync::Arc::new(koe::store::memory::MemoryStore::new());
                    super::$name((store, clock, super::Timing::Paused)).await;
                }
            )*
        }

        mod dynamodb {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let store = std::sync::Arc::new(koe_testkit::dynamodb::fresh_store().await);
                    let clock = std::sync::Arc::new(koe::platform::clock::SystemClock);
                    super::$name((store, clock, super::Timing::Real)).await;
                }
            )*
        }
    };
}

on_each_store_and_its_clock!(
    each_phone_gets_the_pushes_it_needs,
    a_later_run_pushes_again,
    a_push_whose_run_died_goes_again,
    an_unmarked_claim_whose_run_died_is_pushed_by_a_later_run,
);
