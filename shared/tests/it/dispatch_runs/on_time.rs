//! On time: pushes leave at their second and never early; an overdue one within grace at once.

use chrono::Duration;
use koe::domain::device::PushEnvironment;
use koe::domain::reservation::ReservationStatus;
use koe::platform::clock::Clock;
use koe::store::BatchFence;

use crate::dispatch_world::{DynStore, PATIENCE, World, at, at_ms, t0};

// ---------------------------------------------------------------------------------------------
// On time

pub(super) async fn pushes_leave_at_their_second_and_never_early(store: DynStore) {
    let w = World::new(store);
    let a = w.device("on-time-a", PushEnvironment::Production).await;
    let b = w.device("on-time-b", PushEnvironment::Sandbox).await;
    let c = w.device("on-time-c", PushEnvironment::Production).await;
    let d = w.device("on-time-d", PushEnvironment::Production).await;
    let e = w.device("on-time-e", PushEnvironment::Production).await;
    // Two in the same second, one on a fraction, one just inside the 70 s window, one beyond.
    let ra = w.reserve(&a, at(15)).await;
    let rb = w.reserve(&b, at(15)).await;
    let rc = w.reserve(&c, at_ms(42_500)).await;
    let rd = w.reserve(&d, at_ms(69_900)).await;
    let beyond = w.reserve(&e, at(75)).await;

    let run = w.start_run();
    for r in [&ra, &rb, &rc, &rd] {
        w.expect_push_at_its_second(r).await;
    }
    let [report] = w.finish(vec![run], at(72)).await.try_into().unwrap();

    for r in [&ra, &rb, &rc, &rd] {
        let stored = w.stored(r).await.unwrap();
        assert_eq!(
            stored.status,
            ReservationStatus::Sent,
            "{}",
            r.call_id.as_str()
        );
        assert!(
            stored.claimed_at.unwrap() <= r.scheduled_at.utc(),
            "claimed before its second (off the critical path)"
        );
        // Its push mark is its batch's (the run's pushes of its second), written at the
        // second, right before the push: a fence put on it now finds it marked then.
        let second = r.scheduled_at.utc();
        assert_eq!(
            (stored.mark_batch, stored.push_started_at),
            (Some(second), None)
        );
        let run = stored.claimed_by.clone().unwrap();
        let fence = w.store.fence_batch(&run, second, w.clock.now()).await;
        let pushed = w.push.sent_for_call(r.call_id.as_str())[0].at;
        match fence.unwrap() {
            BatchFence::Marked(marked) => assert!(
                second <= marked && marked <= pushed,
                "marked at its second ({marked}), before the push ({pushed})"
            ),
            BatchFence::Fenced => panic!("the batch was marked"),
        }
    }
    assert_eq!(
        w.stored(&beyond).await.unwrap().status,
        ReservationStatus::Scheduled,
        "beyond the window: the next run's"
    );
    assert_eq!((report.claimed, report.sent, report.failed), (4, 4, 0));
    assert_eq!(report.lateness_ms, vec![0, 0, 0, 0]);

    // The payload and options of one push.
    let pushes = w.push.sent();
    let pb = pushes
        .iter()
        .find(|p| p.call_id == rb.call_id.as_str())
        .unwrap();
    assert_eq!(pb.environment, PushEnvironment::Sandbox);
    assert_eq!(pb.token, b.voip_token.expose());
    assert_eq!(pb.expires_at, at(15) + Duration::seconds(30));
    assert_eq!(
        pb.payload,
        serde_json::json!({
            "aps": {},
            "callId": rb.call_id.as_str(),
            "attempt": 1,
            "callerName": "Mika",
            "scheduledAt": "2035-03-01T09:00:15+09:00",
        })
    );
}

pub(super) async fn a_reservation_made_mid_run_still_leaves_on_time(store: DynStore) {
    let w = World::new(store);
    // A call at 65 s keeps the run until then: it selects again every 5 s meanwhile.
    let anchor = w
        .device("mid-run-anchor", PushEnvironment::Production)
        .await;
    let anchored = w.reserve(&anchor, at(65)).await;
    let run = w.start_run();
    let early = w.device("mid-run-early", PushEnvironment::Production).await;
    let late = w.device("mid-run-late", PushEnvironment::Production).await;

    // Made after the run's first selection, 10 s ahead (the least the API allows).
    w.step_to(at(20)).await;
    let r = w.reserve(&early, at(30)).await;
    // The run must have re-selected it: it is claimed before its second.
    w.step_to(at_ms(29_500)).await;
    let claimed = w.wait_status(&r, ReservationStatus::Claimed).await;
    assert!(claimed.claimed_at.unwrap() < at(30));
    w.expect_push_at_its_second(&r).await;

    // Near the end of its stay too (10 s ahead, due just before the anchor).
    w.step_to(at_ms(54_700)).await;
    let r2 = w.reserve(&late, at_ms(64_700)).await;
    w.expect_push_at_its_second(&r2).await;
    w.expect_push_at_its_second(&anchored).await;

    let [report] = w.finish(vec![run], at(66)).await.try_into().unwrap();
    assert_eq!(report.sent, 3);
    assert!(report.queries >= 12, "re-selected every 5 s: {report:?}");
}

// ---------------------------------------------------------------------------------------------
// Overdue

pub(super) async fn overdue_within_grace_is_sent_at_once_and_beyond_grace_is_missed(
    store: DynStore,
) {
    let w = World::new(store);
    let late = w.device("late", PushEnvironment::Production).await;
    let lost = w.device("too-late", PushEnvironment::Production).await;
    let r_late = w.reserve(&late, at(-60)).await;
    let r_lost = w.reserve(&lost, at(-130)).await;

    let run = w.start_run();
    let sent = w
        .push
        .wait_for("the overdue push", PATIENCE, |a| {
            a.iter().any(|p| p.accepted)
        })
        .await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].call_id, r_late.call_id.as_str());
    assert_eq!(sent[0].at, t0(), "sent at once");
    w.wait_status(&r_lost, ReservationStatus::Missed).await;
    let [report] = w.finish(vec![run], at(72)).await.try_into().unwrap();

    assert_eq!(
        w.stored(&r_late).await.unwrap().status,
        ReservationStatus::Sent
    );
    assert!(
        w.push.sent_for_call(r_lost.call_id.as_str()).is_empty(),
        "a missed call never rings"
    );
    assert_eq!((report.sent, report.missed), (1, 1), "{report:?}");
    assert_eq!(report.lateness_ms, vec![60_000]);
}
