//! What a push whose fate is not an answer from APNs records (issue 48). One that got no
//! answer (it may have left) to a device that confirms its calls:
//! its phone may be ringing, so the push counts as left and the call waits for its
//! confirmation, as after any push: pushed again after the wait, and `unconfirmed` after the
//! last push if no confirmation came; never `failed` (push state unknown), and no notice
//! before the wait has run out. A device without `confirmsCalls` gets `failed` at once
//! (`dispatch_runs::apns_answers`). On tokio's paused time.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use koe::dispatch::RunCause;
use koe::domain::reservation::{CallId, Reservation, ReservationStatus};
use koe::platform::clock::Clock;
use koe::push::PushError;
use koe::store::ReservationStore;
use koe::store::memory::MemoryStore;
use koe_testkit::clock::TokioClock;
use koe_testkit::dispatching::{dispatcher_on, reserve_for, short_run};
use koe_testkit::push::{RecordingPushSender, Scripted, device};

fn t(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

type World = (
    Arc<MemoryStore>,
    Arc<TokioClock>,
    Arc<RecordingPushSender>,
    Reservation,
);

/// Device `name` (registered an hour before, confirming its calls or not) with a call due at
/// 07:00:00, five seconds from the clock's now, and a push sender recording on that clock.
async fn a_call_at_seven(name: &str, confirms_calls: bool) -> World {
    let store = Arc::new(MemoryStore::new());
    let now = t("2026-01-01T06:59:55Z");
    let made = now - Duration::hours(1);
    let clock = Arc::new(TokioClock::at(now));
    let mut phone = device(name, &format!("{:064x}", name.len()), made);
    phone.confirms_calls = confirms_calls;
    let at = t("2026-01-01T07:00:00Z").fixed_offset();
    let r = reserve_for(store.as_ref(), &phone, at, None, made, CallId::generate()).await;
    let push = Arc::new(RecordingPushSender::new(clock.clone()));
    (store, clock, push, r)
}

#[tokio::test(start_paused = true)]
async fn a_hung_push_to_a_confirming_device_waits_for_its_confirmation() {
    let (store, clock, push, r) = a_call_at_seven("confirming", true).await;
    push.script("confirming", [Scripted::Hang]);
    let mut settings = short_run();
    settings.window = std::time::Duration::from_secs(40);
    let report = dispatcher_on(&store, &push, &clock, settings.clone(), "x")
        .run(RunCause::Local)
        .await;

    let attempts = push.attempts();
    assert!(!attempts[0].accepted, "the first push hung: {attempts:#?}");
    let wait = Duration::from_std(settings.confirm_wait).unwrap();
    let again: Vec<_> = attempts.iter().skip(1).collect();
    assert_eq!(
        again.len() as u32,
        settings.max_pushes - 1,
        "pushed again after each wait: {attempts:#?}"
    );
    assert!(again[0].at >= attempts[0].at + wait, "{attempts:#?}");
    let end = store
        .get_reservation(&r.device_id, clock.now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(end.status, ReservationStatus::Unconfirmed, "{end:?}");
    assert_eq!(end.pushes, settings.max_pushes, "{end:?}");
    assert_eq!((report.failed, report.push_unknown), (0, 0), "{report:?}");
}

/// A push that never left through its whole budget (no stream in time, refused, above a
/// GOAWAY's last stream id: `Retryable` without a status) is not recorded `failed`, which would
/// say it may have left or APNs refused it: the claim is given back, the run that knows it
/// leaves it, and the next minute's run sends it, once, within grace.
#[tokio::test(start_paused = true)]
async fn a_push_that_never_left_is_given_back_and_sent_by_the_next_run() {
    let (store, clock, push, r) = a_call_at_seven("unsent", false).await;
    let at = r.scheduled_at.utc();
    let never_left = Scripted::Fail(PushError::Retryable {
        status: None,
        reason: "no stream within 500 ms".into(),
    });
    // At most four attempts fit in the one-second budget (backoff 100, 200, 400 ms).
    push.script("unsent", vec![never_left; 4]);
    let mut settings = short_run();
    settings.window = std::time::Duration::from_secs(20);
    let first = dispatcher_on(&store, &push, &clock, settings.clone(), "a")
        .run(RunCause::Local)
        .await;
    let after_first = store.get_reservation(&r.device_id, clock.now()).await;
    let after_first = after_first.unwrap().unwrap();
    assert_eq!(
        after_first.status,
        ReservationStatus::Scheduled,
        "{first:?}"
    );
    assert_eq!((first.failed, first.released), (0, 1), "{first:?}");
    assert!(push.sent().is_empty());

    tokio::time::sleep_until(clock.instant(t("2026-01-01T07:01:00Z"))).await;
    settings.window = std::time::Duration::from_secs(3);
    let next = dispatcher_on(&store, &push, &clock, settings.clone(), "b")
        .run(RunCause::Local)
        .await;
    let sent = push.sent();
    assert_eq!(sent.len(), 1, "{next:?}");
    assert!(sent[0].at <= at + Duration::from_std(settings.grace).unwrap());
    let end = store.get_reservation(&r.device_id, clock.now()).await;
    assert_eq!(end.unwrap().unwrap().status, ReservationStatus::Sent);
}
