//! A push again due after the window of the run that pushed, taken by a later run of the same
//! process (ONE `Dispatcher`, as koe-local's loop and a warm Lambda container keep it): it
//! leaves within a second of its due time, each attempt once. Manual clock (`dispatch_world`),
//! production timing (70 s window, 5 s confirmation wait, 3 pushes), both stores.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use koe::dispatch::{Dispatcher, RunCause, RunReport};
use koe::domain::device::PushEnvironment;
use koe::domain::reservation::{Reservation, ReservationStatus};
use koe::store::Store;
use tokio::task::JoinHandle;

use crate::dispatch_world::{PATIENCE, STEP, World, at};

/// A run of `dispatcher` started at the clock's current time.
fn start(dispatcher: &Dispatcher) -> JoinHandle<RunReport> {
    let dispatcher = dispatcher.clone();
    tokio::spawn(async move { dispatcher.run(RunCause::Local).await })
}

/// A call due at `due` to a device that confirms its calls (and whose phone never does).
async fn confirming_call(w: &World, due: DateTime<Utc>) -> Reservation {
    let mut device = w
        .device("push-again-device", PushEnvironment::Production)
        .await;
    device.confirms_calls = true;
    w.store.put_device(&device).await.unwrap();
    w.reserve(&device, due).await
}

/// A call due at 66 s to a device that confirms its calls, and the first run of the process's
/// one dispatcher, started at 0 s (its window: to 70 s).
async fn first_run_holding_a_call(w: &World) -> (Reservation, Dispatcher, JoinHandle<RunReport>) {
    let r = confirming_call(w, at(66)).await;
    let dispatcher = w.dispatcher();
    let first = start(&dispatcher);
    (r, dispatcher, first)
}

/// Holds the clock just before `due`, then at `due`, and waits (real time) for the push of
/// `attempt`: it leaves at `due` (within a second), and once.
async fn expect_attempt_at(w: &World, r: &Reservation, attempt: u64, due: DateTime<Utc>) {
    let call = r.call_id.as_str().to_owned();
    let of_attempt = |p: &koe_testkit::push::RecordedPush| {
        p.call_id == call && p.payload["attempt"].as_u64() == Some(attempt)
    };
    w.step_to(due - STEP).await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(
        !w.push.attempts().iter().any(of_attempt),
        "attempt {attempt} left before {due}"
    );
    w.step_to(due).await;
    let attempts = w
        .push
        .wait_for(&format!("attempt {attempt} of {call}"), PATIENCE, |a| {
            a.iter().any(|p| of_attempt(p) && p.accepted)
        })
        .await;
    let pushes: Vec<_> = attempts.iter().filter(|p| of_attempt(p)).collect();
    assert_eq!(pushes.len(), 1, "attempt {attempt} once: {pushes:#?}");
    assert!(
        pushes[0].at >= due && pushes[0].at < due + Duration::seconds(1),
        "attempt {attempt} due {due} left at {}",
        pushes[0].at
    );
}

/// Attempts 2 and 3 on time, then `unconfirmed`; every run ends.
async fn pushed_again_on_time(w: &World, r: &Reservation, runs: Vec<JoinHandle<RunReport>>) {
    let first = r.scheduled_at.utc();
    let wait = Duration::from_std(w.settings.confirm_wait).unwrap();
    expect_attempt_at(w, r, 2, first + wait).await;
    expect_attempt_at(w, r, 3, first + wait * 2).await;
    w.finish(runs, first + wait * 3 + Duration::seconds(2))
        .await;
    let stored = w.wait_status(r, ReservationStatus::Unconfirmed).await;
    assert_eq!(stored.pushes, 3);
    assert_eq!(w.push.sent_for_call(r.call_id.as_str()).len(), 3);
}

/// koe-local: the schedule's next run started (at 60 s) while the first (window to 70 s) held
/// the call; the first pushes at 66 s, the push again is due at 71 s, after its window.
pub(crate) async fn a_push_again_after_the_window_goes_on_time_with_an_overlapping_run(
    store: Arc<dyn Store>,
) {
    let w = World::new(store);
    let (r, dispatcher, first) = first_run_holding_a_call(&w).await;
    w.step_to(at(60)).await;
    let second = start(&dispatcher);
    w.expect_push_at_its_second(&r).await;
    pushed_again_on_time(&w, &r, vec![first, second]).await;
}

/// A warm container: the next run starts after the one that pushed has ended.
pub(crate) async fn a_push_again_after_the_window_goes_on_time_with_the_next_run(
    store: Arc<dyn Store>,
) {
    let w = World::new(store);
    let (r, dispatcher, first) = first_run_holding_a_call(&w).await;
    w.expect_push_at_its_second(&r).await;
    w.finish(vec![first], at(67)).await;
    w.step_to(at(68)).await;
    let next = start(&dispatcher);
    pushed_again_on_time(&w, &r, vec![next]).await;
}

on_each_store!(
    a_push_again_after_the_window_goes_on_time_with_an_overlapping_run,
    a_push_again_after_the_window_goes_on_time_with_the_next_run,
);
