//! A crowded second in a slow window, in-process on paused time: 200 calls due in one second, and
//! a share of the store's replies held 1.5 s (each request carried out at once, its answer late,
//! so past the dispatcher's attempt timeout it is a store error) from 1.5 s before the second to
//! 3.5 s after (`koe_testkit::dynamodb::held_replies`, the model `bench/slow-replies.sh` runs at
//! 10,000 calls). The run makes each unanswered request again with its token: every call rings
//! exactly once, none fails, none is given back. Then one call alone, the replies of one of its
//! steps held: its push leaves at the exact millisecond those holds allow. On tokio's paused
//! time, so it takes no wall time and a busy machine changes nothing.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use koe::dispatch::{Dispatcher, RunCause};
use koe::domain::reservation::{Reservation, ReservationStatus};
use koe::platform::config::{Config, Vars};
use koe::store::memory::MemoryStore;
use koe::store::prelude::*;
use koe_testkit::clock::TokioClock;
use koe_testkit::dispatching::reserve_at;
use koe_testkit::dynamodb::held_replies::{HeldReplies, HeldStore};
use koe_testkit::push::RecordingPushSender;

const CALLS: usize = 200;
const HOLD: StdDuration = StdDuration::from_millis(1500);

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// `CALLS` calls spread over the second `second`, made an hour before.
async fn crowd(store: &MemoryStore, second: DateTime<Utc>) -> Vec<Reservation> {
    let made = second - Duration::hours(1);
    let mut calls = Vec::with_capacity(CALLS);
    for i in 0..CALLS {
        let at = second + Duration::milliseconds((i * 1000 / CALLS) as i64);
        let (name, token) = (format!("held-{i}"), format!("{i:064x}"));
        let r = reserve_at(store, &name, &token, at.fixed_offset(), made).await;
        calls.push(r);
    }
    calls
}

async fn crowded_second_with_replies_held(fraction: f64) {
    let second = t("2026-01-01T07:00:00Z");
    let clock = Arc::new(TokioClock::at(second - Duration::seconds(10)));
    let inner = Arc::new(MemoryStore::new());
    let calls = crowd(&inner, second).await;
    let held = Arc::new(HeldStore::new(
        inner.clone(),
        HeldReplies {
            fraction,
            hold: HOLD,
            from: clock.instant(second - Duration::milliseconds(1500)),
            until: clock.instant(second + Duration::milliseconds(3500)),
            seed: 23,
        },
    ));
    let push = Arc::new(RecordingPushSender::new(clock.clone()));
    push.set_latency(StdDuration::from_millis(120));
    let mut settings = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    // The run ends 4 s after the second (its deliveries carry on to their end).
    settings.window = StdDuration::from_secs(14);
    let dispatcher = Dispatcher::new(held.clone(), push.clone(), clock, settings, "held");
    let report = dispatcher.run(RunCause::Local).await;

    let case = format!("{}% of replies held", fraction * 100.0);
    let stats = held.stats();
    assert!(stats.timed_out > 0, "{case}: replies were held: {stats:?}");
    let mut worst = 0;
    for r in &calls {
        let pushes = push.sent_for_call(r.call_id.as_str());
        assert_eq!(pushes.len(), 1, "{case}: {} rang once", r.call_id.as_str());
        let late = (pushes[0].at - r.scheduled_at.utc()).num_milliseconds();
        assert!(late >= 0, "{case}: never early");
        worst = worst.max(late);
        let stored = inner.get_reservation(&r.device_id, second).await.unwrap();
        assert_eq!(stored.unwrap().status, ReservationStatus::Sent, "{case}");
    }
    assert_eq!(
        push.attempts().len(),
        CALLS,
        "{case}: one push a call in all"
    );
    assert_eq!(
        (report.sent as usize, report.failed, report.released),
        (CALLS, 0, 0),
        "{case}: {report:?}"
    );
    assert!(report.resolved > 0, "{case}: {report:?}");
    assert!(worst < 5_000, "{case}: worst {worst} ms late");
    eprintln!(
        "{case}: {CALLS} rang once, worst {worst} ms late, {} replies held ({} past the attempt \
         timeout), {} requests resolved",
        stats.held, stats.timed_out, report.resolved
    );
}

#[tokio::test(start_paused = true)]
async fn a_crowded_second_with_a_fifth_of_its_replies_held_rings_every_call_once() {
    crowded_second_with_replies_held(0.2).await;
}

#[tokio::test(start_paused = true)]
async fn a_crowded_second_with_half_its_replies_held_rings_every_call_once() {
    crowded_second_with_replies_held(0.5).await;
}

/// The plan's claim for a lone call, and a confirming device's push mark, ahead of its second
/// (`koe::dispatch::plan`); the device is read `DEVICE_READ_LEAD` (1.5 s) before the claim.
const CLAIM_LEAD_MS: i64 = 500;
const MARK_LEAD_MS: i64 = 200;

/// One call due at 07:00:00 alone, every reply to a request the dispatcher makes from `from_ms`
/// to `until_ms` around that second held 1.5 s (past the 500 ms attempt timeout: each held
/// request is cut off and made again; three times at least). Its device confirms its calls if `confirms`. It rings
/// once, never fails; how late (ms) its one push left.
async fn one_call_with_replies_held(from_ms: i64, until_ms: i64, confirms: bool) -> i64 {
    let second = t("2026-01-01T07:00:00Z");
    let clock = Arc::new(TokioClock::at(second - Duration::seconds(10)));
    let inner = Arc::new(MemoryStore::new());
    let made = second - Duration::hours(1);
    let r = reserve_at(
        &*inner,
        "held-one",
        &"ab".repeat(32),
        second.fixed_offset(),
        made,
    )
    .await;
    if confirms {
        let mut device = inner.get_device(&r.device_id, made).await.unwrap().unwrap();
        device.confirms_calls = true;
        inner.put_device(&device).await.unwrap();
    }
    let held = Arc::new(HeldStore::new(
        inner.clone(),
        HeldReplies {
            fraction: 1.0,
            hold: HOLD,
            from: clock.instant(second + Duration::milliseconds(from_ms)),
            until: clock.instant(second + Duration::milliseconds(until_ms)),
            seed: 7,
        },
    ));
    let push = Arc::new(RecordingPushSender::new(clock.clone()));
    let mut settings = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    settings.window = StdDuration::from_secs(14);
    let dispatcher = Dispatcher::new(held.clone(), push.clone(), clock, settings, "held-one");
    let report = dispatcher.run(RunCause::Local).await;

    let case = format!("replies held {from_ms}..{until_ms} ms");
    let pushes = push.sent_for_call(r.call_id.as_str());
    assert_eq!(pushes.len(), 1, "{case}: rang once: {:#?}", push.attempts());
    let late = (pushes[0].at - second).num_milliseconds();
    // Fewer held means the run made its request again later than at each attempt timeout.
    let stats = held.stats();
    assert!(stats.timed_out >= 3, "{case}: {stats:?}, {late} ms late");
    assert_eq!(push.attempts().len(), 1, "{case}: one push in all");
    assert_eq!(
        (report.sent, report.failed, report.released),
        (1, 0, 0),
        "{case}: {report:?}"
    );
    assert!(report.resolved >= 1, "{case}: {report:?}");
    late
}

/// Three attempts of a claim cut off at 500 ms each, made again at once each time (the run's
/// pauses, 50, 100 and 200 ms drawn from each attempt's start, end within it; not waiting for a
/// held reply, nor left to a later run): the push leaves as the fourth is answered.
#[tokio::test(start_paused = true)]
async fn a_claim_whose_replies_come_late_leaves_its_push_three_attempt_timeouts_after_it() {
    let late = one_call_with_replies_held(-CLAIM_LEAD_MS - 100, 1_000, false).await;
    assert_eq!(late, 3 * 500 - CLAIM_LEAD_MS);
}

/// A confirming device's push mark (a write of its own), held the same way.
#[tokio::test(start_paused = true)]
async fn a_push_mark_whose_replies_come_late_leaves_its_push_three_attempt_timeouts_after_it() {
    let late = one_call_with_replies_held(-MARK_LEAD_MS - 100, 1_300, true).await;
    assert_eq!(late, 3 * 500 - MARK_LEAD_MS);
}

/// The device is read 2 s ahead: its three held attempts are waited out before the claim, and
/// the push leaves at its second.
#[tokio::test(start_paused = true)]
async fn a_device_read_whose_replies_come_late_leaves_its_push_on_time() {
    let late =
        one_call_with_replies_held(-CLAIM_LEAD_MS - 1_600, -CLAIM_LEAD_MS - 100, false).await;
    assert_eq!(late, 0);
}

/// The outcome is written after the push: its held replies do not hold the push up.
#[tokio::test(start_paused = true)]
async fn an_outcome_whose_replies_come_late_leaves_its_push_on_time() {
    let late = one_call_with_replies_held(-CLAIM_LEAD_MS + 100, 3_500, false).await;
    assert_eq!(late, 0);
}
