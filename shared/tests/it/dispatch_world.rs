//! The dispatcher's test world: a store (either adapter), a manual clock, a recording push
//! sender and the production timing, with the steps the dispatch tests share.
//!
//! Time only moves when a test moves it ([`World::step_to`] walks the clock in 100 ms steps, so
//! every sleeping task wakes at each instant it waits for). A test holds the clock at a
//! reservation's second and waits (real time) for its push: the push is then recorded at exactly
//! that second if and only if the dispatcher was ready for it, and never before it.

use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use chrono::{DateTime, Duration, FixedOffset, Utc};
use koe::dispatch::{Dispatcher, InFlight, RunCause, RunReport};
use koe::domain::device::{Device, PushEnvironment};
use koe::domain::reservation::{Reservation, ReservationStatus, ScheduledAt};
use koe::platform::clock::Clock;
use koe::platform::config::{Config, DispatchConfig, Vars};
use koe::push::PushSender;
use koe::store::prelude::*;
use koe_testkit::clock::ManualClock;
use koe_testkit::push::RecordingPushSender;
use tokio::task::JoinHandle;

pub(crate) type DynStore = Arc<dyn Store>;

/// The tests' start: a minute boundary, far enough ahead that no TTL set here ever lapses.
pub(crate) const T0: &str = "2035-03-01T00:00:00Z";
pub(crate) const STEP: Duration = Duration::milliseconds(100);
pub(crate) const PATIENCE: StdDuration = StdDuration::from_secs(15);

pub(crate) fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(T0)
        .unwrap()
        .with_timezone(&Utc)
}

/// `T0` plus `ms` milliseconds.
pub(crate) fn at_ms(ms: i64) -> DateTime<Utc> {
    t0() + Duration::milliseconds(ms)
}

/// `T0` plus `s` seconds.
pub(crate) fn at(s: i64) -> DateTime<Utc> {
    at_ms(s * 1000)
}

pub(crate) fn production_timing() -> DispatchConfig {
    Config::from_vars(&Vars::from_pairs(&[]))
        .expect("defaults are valid")
        .dispatch
}

pub(crate) struct World {
    pub(crate) store: DynStore,
    pub(crate) clock: Arc<ManualClock>,
    pub(crate) push: Arc<RecordingPushSender>,
    pub(crate) settings: DispatchConfig,
}

impl World {
    pub(crate) fn new(store: DynStore) -> World {
        let clock = Arc::new(ManualClock::at(t0()));
        let push = Arc::new(RecordingPushSender::new(clock.clone()));
        World {
            store,
            clock,
            push,
            settings: production_timing(),
        }
    }

    pub(crate) fn dispatcher(&self) -> Dispatcher {
        self.dispatcher_with(self.push.clone())
    }

    pub(crate) fn dispatcher_with(&self, push: Arc<dyn PushSender>) -> Dispatcher {
        Dispatcher::new(
            self.store.clone(),
            push,
            self.clock.clone(),
            self.settings.clone(),
            "test-salt",
        )
    }

    /// Starts a run at the clock's current time.
    pub(crate) fn start_run(&self) -> JoinHandle<RunReport> {
        let dispatcher = self.dispatcher();
        tokio::spawn(async move { dispatcher.run(RunCause::Local).await })
    }

    /// Starts a run at the clock's current time that pushes through `push`.
    pub(crate) fn start_run_with(&self, push: Arc<dyn PushSender>) -> JoinHandle<RunReport> {
        let dispatcher = self.dispatcher_with(push);
        tokio::spawn(async move { dispatcher.run(RunCause::Local).await })
    }

    /// Walks the clock to `t` in 10 ms steps (push backoffs wait on it).
    pub(crate) async fn walk_finely_to(&self, t: DateTime<Utc>) {
        while self.clock.now() < t {
            let next = (self.clock.now() + Duration::milliseconds(10)).min(t);
            self.clock.set(next);
            tokio::time::sleep(StdDuration::from_millis(1)).await;
        }
    }

    /// Starts a run that shares `in_flight` with other runs (one process's runs).
    pub(crate) fn start_run_sharing(&self, in_flight: &InFlight) -> JoinHandle<RunReport> {
        let dispatcher = self.dispatcher().sharing(in_flight.clone());
        tokio::spawn(async move { dispatcher.run(RunCause::Local).await })
    }

    pub(crate) async fn device(&self, name: &str, environment: PushEnvironment) -> Device {
        let device = koe_testkit::devices::device(name, environment, self.clock.now());
        self.store.put_device(&device).await.expect("put_device");
        device
    }

    /// A `scheduled` reservation for `device` at `when` (written in JST), stored directly so
    /// that overdue ones can be made too.
    pub(crate) async fn reserve(&self, device: &Device, when: DateTime<Utc>) -> Reservation {
        let jst = FixedOffset::east_opt(9 * 3600).unwrap();
        let now = self.clock.now();
        let r = Reservation::new(
            device.device_id.clone(),
            ScheduledAt::from_stored(when.with_timezone(&jst)),
            Some("Mika".into()),
            now.min(when - Duration::seconds(10)),
        );
        self.store
            .create_reservation(&r, now, now - Duration::seconds(150))
            .await
            .expect("create_reservation");
        r
    }

    /// Walks the clock to `t` in [`STEP`]s, letting woken tasks run after each.
    pub(crate) async fn step_to(&self, t: DateTime<Utc>) {
        while self.clock.now() < t {
            let next = (self.clock.now() + STEP).min(t);
            self.clock.set(next);
            tokio::time::sleep(StdDuration::from_millis(2)).await;
        }
    }

    pub(crate) async fn stored(&self, r: &Reservation) -> Option<Reservation> {
        self.store
            .get_reservation(&r.device_id, self.clock.now())
            .await
            .expect("get_reservation")
    }

    /// Waits (real time) until the reservation has `status`; returns it.
    pub(crate) async fn wait_status(
        &self,
        r: &Reservation,
        status: ReservationStatus,
    ) -> Reservation {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let stored = self.stored(r).await;
            if let Some(stored) = stored.clone().filter(|s| s.status == status) {
                return stored;
            }
            assert!(
                Instant::now() < deadline,
                "{} never became {status:?}: {stored:?}",
                r.call_id.as_str()
            );
            tokio::time::sleep(StdDuration::from_millis(2)).await;
        }
    }

    /// Holds the clock at `r`'s second and waits for its accepted push; asserts it left exactly
    /// then, and nothing of it before.
    pub(crate) async fn expect_push_at_its_second(&self, r: &Reservation) {
        let second = r.scheduled_at.utc();
        self.step_to(second - STEP).await;
        tokio::time::sleep(StdDuration::from_millis(20)).await;
        assert!(
            self.push
                .attempts()
                .iter()
                .all(|p| p.call_id != r.call_id.as_str() || p.at >= second),
            "{} was pushed before its second",
            r.call_id.as_str()
        );
        self.step_to(second).await;
        let call = r.call_id.as_str().to_owned();
        let attempts = self
            .push
            .wait_for(&format!("the push of {call}"), PATIENCE, |a| {
                a.iter().any(|p| p.call_id == call && p.accepted)
            })
            .await;
        let pushes: Vec<_> = attempts.iter().filter(|p| p.call_id == call).collect();
        assert_eq!(pushes.len(), 1, "one push for {call}: {pushes:#?}");
        assert_eq!(pushes[0].at, second, "{call} left at its second");
    }

    /// Walks the clock to `until`, then waits for the runs to end.
    pub(crate) async fn finish(
        &self,
        runs: Vec<JoinHandle<RunReport>>,
        until: DateTime<Utc>,
    ) -> Vec<RunReport> {
        self.step_to(until).await;
        let mut reports = Vec::new();
        for run in runs {
            let report = tokio::time::timeout(PATIENCE, run)
                .await
                .expect("the run ends once its window has passed")
                .expect("the run does not panic");
            reports.push(report);
        }
        reports
    }

    pub(crate) fn window(&self) -> Duration {
        Duration::from_std(self.settings.window).unwrap()
    }
}
