//! A missed-call notice whose every push surely failed (APNs did not take it: the outage the
//! notice reports) is released for the next minute's run, which sends the notice alone (no call
//! push), once; while APNs stays down it is tried each minute until the call's minute leaves the
//! runs' look-back, then given up, leaving nothing in the index (docs/dispatch.md,
//! "Missed-call notice"). On tokio's paused time.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use koe::dispatch::{RunCause, RunReport};
use koe::domain::device::AlertToken;
use koe::domain::reservation::{CallId, Reservation, ReservationStatus};
use koe::platform::clock::Clock;
use koe::push::PushError;
use koe::store::memory::MemoryStore;
use koe::store::prelude::*;
use koe_testkit::clock::TokioClock;
use koe_testkit::dispatching::{dispatcher_on, reserve_for, short_run};
use koe_testkit::push::{RecordingPushSender, Scripted, device};

fn t(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

/// APNs down: a push it surely did not take.
fn down() -> Scripted {
    Scripted::Fail(PushError::Retryable {
        status: Some(503),
        reason: "ServiceUnavailable".into(),
    })
}

struct World {
    store: Arc<MemoryStore>,
    clock: Arc<TokioClock>,
    push: Arc<RecordingPushSender>,
    r: Reservation,
}

impl World {
    /// A device with an alert token and its call at 07:00:00, whose call pushes APNs refuses
    /// (5xx: it ends `failed`) and whose first `alerts_down` notice pushes it does not take.
    async fn new(alerts_down: usize) -> World {
        let store = Arc::new(MemoryStore::new());
        let now = t("2026-01-01T06:59:55Z");
        let clock = Arc::new(TokioClock::at(now));
        let mut phone = device("outage", &format!("{:064x}", 11), now - Duration::hours(1));
        phone.alert_token = Some(AlertToken::parse("alertToken", &format!("{:064x}", 12)).unwrap());
        let at = t("2026-01-01T07:00:00Z").fixed_offset();
        let made = now - Duration::hours(1);
        let r = reserve_for(store.as_ref(), &phone, at, None, made, CallId::generate()).await;
        let push = Arc::new(RecordingPushSender::new(clock.clone()));
        push.script("outage", vec![down(); 20]);
        push.script_alerts("outage", vec![down(); alerts_down]);
        World {
            store,
            clock,
            push,
            r,
        }
    }

    /// A run started at `start` with a window of `window_s` seconds, to its end.
    async fn run_at(&self, start: &str, window_s: u64) -> RunReport {
        tokio::time::sleep_until(self.clock.instant(t(start))).await;
        let mut settings = short_run();
        settings.window = StdDuration::from_secs(window_s);
        dispatcher_on(&self.store, &self.push, &self.clock, settings, "x")
            .run(RunCause::Local)
            .await
    }

    async fn stored(&self) -> Reservation {
        let held = self
            .store
            .get_reservation(&self.r.device_id, self.clock.now());
        held.await.unwrap().unwrap()
    }

    /// The call's pushes tried (call pushes, not notices).
    fn call_pushes(&self) -> usize {
        let call = self.r.call_id.as_str();
        self.push
            .attempts()
            .iter()
            .filter(|p| p.call_id == call)
            .count()
    }

    fn notice_attempts(&self) -> usize {
        self.push.alert_attempts().len()
    }

    /// What the call's minute's index holds.
    async fn indexed(&self) -> usize {
        let minute = self.r.scheduled_at.due_minute();
        self.store.due_calls(&minute, 0).await.unwrap().len()
    }
}

#[tokio::test(start_paused = true)]
async fn a_notice_apns_did_not_take_is_sent_by_the_next_minutes_run_once() {
    let w = World::new(3).await;
    let first = w.run_at("2026-01-01T06:59:55Z", 20).await;
    assert_eq!(w.stored().await.status, ReservationStatus::Failed);
    assert_eq!(
        (first.notices_sent, first.notices_failed),
        (0, 1),
        "{first:?}"
    );
    assert_eq!(w.notice_attempts(), 3, "every attempt down");
    assert!(w.push.alerts_for_call(w.r.call_id.as_str()).is_empty());
    let call_pushes = w.call_pushes();
    assert!(call_pushes > 0);

    // APNs is back: the next minute's run sends the notice alone.
    let next = w.run_at("2026-01-01T07:01:00Z", 3).await;
    let notices = w.push.alerts_for_call(w.r.call_id.as_str());
    assert_eq!(notices.len(), 1, "{next:?} {notices:#?}");
    assert_eq!(notices[0].payload["reason"], "failed");
    assert_eq!(next.notices_sent, 1, "{next:?}");
    assert_eq!(w.call_pushes(), call_pushes, "no call push");
    let stored = w.stored().await;
    assert_eq!(stored.status, ReservationStatus::Failed);
    assert!(stored.notice_sent_at.is_some(), "{stored:?}");
    assert_eq!(w.indexed().await, 0, "off the index");

    // Later runs send nothing more.
    w.run_at("2026-01-01T07:02:00Z", 3).await;
    w.run_at("2026-01-01T07:03:00Z", 3).await;
    assert_eq!(w.push.alerts_for_call(w.r.call_id.as_str()).len(), 1);
    assert_eq!(w.call_pushes(), call_pushes);
}

#[tokio::test(start_paused = true)]
async fn a_notice_is_given_up_when_apns_is_down_past_the_look_back() {
    let w = World::new(1000).await;
    w.run_at("2026-01-01T06:59:55Z", 20).await;
    let call_pushes = w.call_pushes();
    let mut tried = vec![w.notice_attempts()];
    for minute in 1..=10 {
        w.run_at(&format!("2026-01-01T07:{minute:02}:00Z"), 3).await;
        tried.push(w.notice_attempts());
    }
    // Tried each minute while a run a minute late would still select 07:00 (look-back 5 min
    // past grace 2 min: up to 07:08), then given up.
    let per_run: Vec<usize> = tried
        .iter()
        .zip(std::iter::once(&0).chain(&tried))
        .map(|(now, before)| now - before)
        .collect();
    assert_eq!(per_run, [3, 3, 3, 3, 3, 3, 3, 3, 0, 0, 0], "{per_run:?}");
    assert!(w.push.alerts_for_call(w.r.call_id.as_str()).is_empty());
    assert_eq!(
        w.call_pushes(),
        call_pushes,
        "no call push after the first run"
    );
    assert_eq!(w.indexed().await, 0, "nothing left in the index");
    let stored = w.stored().await;
    assert_eq!(stored.notice_sent_at, None);
    assert!(!stored.notice_retry, "{stored:?}");
}

/// A notice push that may have reached Apple (no answer in time) is never released: it may
/// have been delivered, and a second one would be a duplicate.
#[tokio::test(start_paused = true)]
async fn a_notice_that_may_have_left_is_not_released() {
    let w = World::new(0).await;
    w.push.script_alerts("outage", [Scripted::Hang]);
    w.run_at("2026-01-01T06:59:55Z", 20).await;
    assert_eq!(w.notice_attempts(), 1);
    assert_eq!(w.indexed().await, 0, "not back in the index");
    w.run_at("2026-01-01T07:01:00Z", 3).await;
    assert_eq!(w.notice_attempts(), 1, "not tried again");
    assert!(!w.stored().await.notice_retry);
}
