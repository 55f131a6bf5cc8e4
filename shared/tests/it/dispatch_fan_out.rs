//! A minute split into parts (`koe::dispatch::fan_out`): the coordinating run hands the parts
//! out through the trigger (here: each part runs in a dispatcher of its own, with its own
//! in-flight set, as another invocation of the function would); together they push every call
//! exactly once. A trigger that cannot hand parts out leaves the whole minute
//! to the coordinator. Real time, memory store, 1,400 calls due within one second.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use async_trait::async_trait;
use chrono::{Duration, Utc};
use koe::dispatch::trigger::{DispatchTrigger, TriggerError};
use koe::dispatch::{Dispatcher, RunCause, RunReport};
use koe::domain::due::Part;
use koe::domain::reservation::{Reservation, ReservationStatus};
use koe::platform::clock::SystemClock;
use koe::platform::config::{Config, DispatchConfig, Vars};
use koe::store::memory::MemoryStore;
use koe::store::prelude::*;
use koe_testkit::dispatching::{reserve_at, stored};
use koe_testkit::push::RecordingPushSender;
use tokio::task::JoinHandle;

const CALLS: usize = 1_400;

fn settings() -> DispatchConfig {
    let mut settings = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    settings.window = StdDuration::from_secs(5);
    settings.reselect_every = StdDuration::from_millis(500);
    settings.calls_per_worker = 500;
    settings.max_workers = 8;
    settings
}

struct World {
    store: Arc<dyn Store>,
    push: Arc<RecordingPushSender>,
    calls: Vec<Reservation>,
}

impl World {
    /// `CALLS` devices, each with a call due within the second 2.5 s from now.
    async fn new() -> World {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let now = Utc::now();
        let mut calls = Vec::new();
        for i in 0..CALLS {
            let at = now + Duration::milliseconds(2_500 + (i as i64 * 7) % 1_000);
            let (name, token) = (format!("fan-out-{i}"), format!("{i:064x}"));
            let r = reserve_at(&*store, &name, &token, at.fixed_offset(), now).await;
            calls.push(r);
        }
        World {
            store,
            push: Arc::new(RecordingPushSender::new(Arc::new(SystemClock))),
            calls,
        }
    }

    /// A dispatcher as a fresh invocation has it: nothing shared in memory with the others.
    fn dispatcher(&self) -> Dispatcher {
        Dispatcher::new(
            self.store.clone(),
            self.push.clone(),
            Arc::new(SystemClock),
            settings(),
            "salt",
        )
    }

    /// The parts the coordinator makes: its window's calls as the minutes' counts estimate
    /// them (one create in 32 raises a count by 32), 500 a part.
    async fn parts_expected(&self) -> u32 {
        let minutes: std::collections::BTreeSet<String> = self
            .calls
            .iter()
            .map(|r| koe::domain::reservation::minute_bucket(r.scheduled_at.utc()))
            .collect();
        let mut counted = 0u64;
        for minute in &minutes {
            counted += u64::from(self.store.due_count(minute).await.unwrap());
        }
        let s = settings();
        koe::dispatch::workers_for(counted, s.calls_per_worker, s.max_workers)
    }

    async fn assert_each_call_pushed_once(&self) {
        let mut pushes: HashMap<String, usize> = HashMap::new();
        for push in self.push.sent() {
            *pushes.entry(push.call_id).or_default() += 1;
        }
        assert_eq!(pushes.len(), CALLS, "every call pushed");
        assert!(pushes.values().all(|n| *n == 1), "none twice");
        for r in &self.calls {
            let stored = stored(&*self.store, r).await;
            assert_eq!(stored.status, ReservationStatus::Sent);
        }
    }
}

/// Runs each handed-out part in a dispatcher of its own, as the function's rule would.
struct SpawningTrigger {
    make: Box<dyn Fn() -> Dispatcher + Send + Sync>,
    parts: Mutex<Vec<(Part, JoinHandle<RunReport>)>>,
}

#[async_trait]
impl DispatchTrigger for SpawningTrigger {
    async fn request_run(&self) -> Result<(), TriggerError> {
        unreachable!("not used here")
    }

    async fn hand_out(&self, parts: &[Part]) -> Result<(), TriggerError> {
        for part in parts {
            let dispatcher = (self.make)();
            let part = *part;
            let run = tokio::spawn(async move { dispatcher.run_part(RunCause::Part, part).await });
            self.parts.lock().unwrap().push((part, run));
        }
        Ok(())
    }
}

/// Hands nothing out (the in-process loop's case).
struct NoFanOut;

#[async_trait]
impl DispatchTrigger for NoFanOut {
    async fn request_run(&self) -> Result<(), TriggerError> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_minute_is_split_into_parts_that_push_each_call_once() {
    let w = Arc::new(World::new().await);
    let maker = w.clone();
    let trigger = Arc::new(SpawningTrigger {
        make: Box::new(move || maker.dispatcher()),
        parts: Mutex::new(Vec::new()),
    });
    // 1,400 calls at 500 a part: about three parts (the counts are an estimate), never one.
    let expected = w.parts_expected().await;
    assert!(expected >= 2, "{expected} parts");
    let coordinator = w.dispatcher().fanning_out(trigger.clone());
    let coordinated = coordinator.coordinate(RunCause::Schedule).await;
    assert_eq!(
        (
            coordinated.handed_out,
            coordinated.selected,
            coordinated.sent
        ),
        (expected, 0, 0),
        "the coordinator hands every part out and runs none: {coordinated:?}"
    );
    let parts = std::mem::take(&mut *trigger.parts.lock().unwrap());
    let handed: Vec<Part> = parts.iter().map(|(p, _)| *p).collect();
    let each: Vec<Part> = (0..expected)
        .map(|i| Part::new(i, expected).unwrap())
        .collect();
    assert_eq!(handed, each, "every part of {expected} once");
    let mut reports = Vec::new();
    for (_, run) in parts {
        reports.push(run.await.unwrap());
    }
    for report in &reports {
        assert!(report.sent > 0, "each part sends its share: {report:?}");
        assert_eq!((report.failed, report.missed), (0, 0), "{report:?}");
    }
    let sent: u32 = reports.iter().map(|r| r.sent).sum();
    assert_eq!(sent as usize, CALLS);
    let claimed: u32 = reports.iter().map(|r| r.claimed).sum();
    assert_eq!(claimed as usize, CALLS, "parts never share a call");
    w.assert_each_call_pushed_once().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_way_to_hand_parts_out_the_coordinator_runs_the_whole_minute() {
    let w = World::new().await;
    let report = w
        .dispatcher()
        .fanning_out(Arc::new(NoFanOut))
        .coordinate(RunCause::Schedule)
        .await;
    assert_eq!(report.sent as usize, CALLS, "{report:?}");
    w.assert_each_call_pushed_once().await;
}
