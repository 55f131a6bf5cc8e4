//! A run killed at any instant of a crowded second's run-up (issue 48): its calls' claims are
//! planned seconds ahead (`koe::dispatch::plan`), each naming the run's batch for its second,
//! and the batch's one mark is written at the second, right before the pushes leave. So a run
//! killed at any instant after a call's early claim and before its push leaves a claim whose
//! batch is unmarked: the next run fences the batch, settles the claim, and sends it once,
//! within grace; a call ends `failed` (push state unknown) only if its push left before the
//! kill (its outcome not yet written). On the limits model (the embedded store behind
//! `LimitedStore`, scaled down as in `dispatch_budget`: 40 write units a second, 60 calls in
//! one second) and tokio's paused time: the plan's instants, not the machine's speed. What the
//! model leaves out is the time from the batch's mark to each of its pushes (the mark's round
//! trip, a push's wait for a place or an APNs stream: docs/dispatch.md, "Exactly once").

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use koe::dispatch::{Dispatcher, RunCause};
use koe::domain::reservation::{Reservation, ReservationStatus};
use koe::store::ReservationStore;
use koe::store::memory::MemoryStore;
use koe_testkit::clock::TokioClock;
use koe_testkit::dispatching::{crowd, dispatcher_on, short_run};
use koe_testkit::dynamodb::limited_store::LimitedStore;
use koe_testkit::push::RecordingPushSender;

const BUDGET: u32 = 40;
/// Two writes a call before the second at 30 a second (the dispatcher's share): four seconds
/// of the plan, so most claims leave their lead.
const CALLS: usize = 60;

fn t(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

/// The calls' second.
fn second() -> DateTime<Utc> {
    t("2026-01-01T07:00:00Z")
}

/// What one scenario saw: each call as the killed run left it, and at the end.
struct Killed {
    at_kill: Vec<Reservation>,
    at_end: Vec<Reservation>,
    pushes: Vec<Vec<DateTime<Utc>>>,
}

/// `CALLS` calls due at [`second`], a run started at 06:59:45 killed at `kill`, and the next
/// minute's run (07:01:00).
async fn run_killed_at(kill: DateTime<Utc>) -> Killed {
    let inner = Arc::new(MemoryStore::new());
    let start = t("2026-01-01T06:59:45Z");
    let clock = Arc::new(TokioClock::at(start));
    let made = start - Duration::hours(1);
    let calls = crowd(inner.as_ref(), "killed", CALLS, second(), made).await;
    let store = Arc::new(LimitedStore::on_write_budget(inner.clone(), BUDGET));
    let push = Arc::new(RecordingPushSender::new(clock.clone()));
    let mut settings = short_run();
    settings.window = std::time::Duration::from_secs(20);
    settings.write_budget = BUDGET;

    let first = dispatcher_on(&store, &push, &clock, settings.clone(), "a");
    let run = tokio::spawn(async move { first.run(RunCause::Local).await });
    tokio::time::sleep_until(clock.instant(kill)).await;
    run.abort();
    let _ = run.await;
    let at_kill = reservations(inner.as_ref(), &calls, kill).await;

    let next = t("2026-01-01T07:01:00Z");
    tokio::time::sleep_until(clock.instant(next)).await;
    settings.window = std::time::Duration::from_secs(3);
    Dispatcher::new(store, push.clone(), clock.clone(), settings, "b")
        .run(RunCause::Local)
        .await;
    let end = t("2026-01-01T07:02:00Z");
    let at_end = reservations(inner.as_ref(), &calls, end).await;
    let pushes = calls
        .iter()
        .map(|r| {
            push.sent_for_call(r.call_id.as_str())
                .iter()
                .map(|p| p.at)
                .collect()
        })
        .collect();
    Killed {
        at_kill,
        at_end,
        pushes,
    }
}

async fn reservations(
    store: &MemoryStore,
    calls: &[Reservation],
    now: DateTime<Utc>,
) -> Vec<Reservation> {
    let mut found = Vec::new();
    for r in calls {
        let current = store.get_reservation(&r.device_id, now).await.unwrap();
        found.push(current.expect("the reservation is kept"));
    }
    found
}

#[tokio::test(start_paused = true)]
async fn a_run_killed_at_any_instant_before_a_calls_push_leaves_it_to_the_next_run_which_sends_it_once()
 {
    let grace = Duration::from_std(short_run().grace).unwrap();
    // The plan, as a run that is not killed makes it: claims seconds ahead, each in the
    // batch of its second, none marked on its own.
    let whole = run_killed_at(t("2026-01-01T07:00:30Z")).await;
    let claims: Vec<DateTime<Utc>> = whole.at_kill.iter().filter_map(|r| r.claimed_at).collect();
    assert_eq!(claims.len(), CALLS);
    let first_claim = *claims.iter().min().unwrap();
    assert!(
        first_claim < second() - Duration::seconds(1),
        "claims seconds ahead: {first_claim}"
    );
    for (r, pushes) in whole.at_end.iter().zip(&whole.pushes) {
        assert_eq!(r.status, ReservationStatus::Sent, "{r:?}");
        assert_eq!(pushes.len(), 1);
        assert!(pushes[0] <= second() + Duration::seconds(1), "{pushes:?}");
    }

    // Killed every quarter second through the claims, then every 10 ms from half a second
    // before the second to a quarter after it (the batch's mark, its pushes, their outcomes).
    let mut kills = Vec::new();
    let mut kill = first_claim - Duration::milliseconds(500);
    while kill < second() - Duration::milliseconds(500) {
        kills.push(kill);
        kill += Duration::milliseconds(250);
    }
    while kill <= second() + Duration::milliseconds(250) {
        kills.push(kill);
        kill += Duration::milliseconds(10);
    }
    let (mut recovered, mut pushed_by_killed) = (0, 0);
    for kill in kills {
        let seen = run_killed_at(kill).await;
        for ((before, after), pushes) in seen.at_kill.iter().zip(&seen.at_end).zip(&seen.pushes) {
            let context = format!("killed at {kill}: {before:?} then {after:?}, {pushes:?}");
            assert!(pushes.len() <= 1, "never pushed twice: {context}");
            assert!(
                before.push_started_at.is_none(),
                "no mark of its own: {context}"
            );
            match pushes.first() {
                // Pushed by the killed run before the kill: sent, or `failed` (push state
                // unknown) if its outcome was not written, never pushed again.
                Some(at) if *at <= kill => {
                    pushed_by_killed += 1;
                    assert!(
                        matches!(
                            after.status,
                            ReservationStatus::Sent | ReservationStatus::Failed
                        ),
                        "{context}"
                    );
                }
                // Not pushed when the run was killed: claimed (or not) and its batch unmarked;
                // the next run sends it, once, within grace.
                _ => {
                    assert_eq!(pushes.len(), 1, "{context}");
                    assert!(pushes[0] <= second() + grace, "{context}");
                    assert_eq!(after.status, ReservationStatus::Sent, "{context}");
                    recovered += usize::from(before.claimed_at.is_some());
                }
            }
        }
    }
    assert!(
        recovered > CALLS,
        "claims of killed runs taken over: {recovered}"
    );
    assert!(pushed_by_killed > 0, "some kills came after pushes");
}
