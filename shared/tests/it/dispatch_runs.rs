//! The dispatcher against both store adapters (memory, and DynamoDB Local via
//! `koe_testkit::dynamodb::fresh_store`), in the manual-clock [`World`] of `dispatch_world`.
//! Runs use the
//! production timing from `Config` (70 s window, 5 s re-selection, 500 ms claim lead, 1 s push
//! budget, 120 s grace, 30 s claim timeout), so no test waits in real time for any of it.
//!
//! Each behaviour is an adapter-agnostic `async fn name(store)`; `dispatch_suite!` runs all of
//! them once per adapter.

use std::collections::HashMap;
use std::time::Duration as StdDuration;

use chrono::{Duration, FixedOffset};
use koe::clock::Clock;
use koe::dispatch::InFlight;
use koe::domain::device::PushEnvironment;
use koe::domain::reservation::{Reservation, ReservationStatus, RunToken};
use koe_testkit::harness::{send, spawn_app_with};
use koe_testkit::push::Scripted;
use koe_testkit::push::limited::{Answer, ApnsLimits, LimitedApns, call_key};

use crate::dispatch_world::{DynStore, PATIENCE, STEP, World, at, at_ms, t0};

// ---------------------------------------------------------------------------------------------
// On time

async fn pushes_leave_at_their_second_and_never_early(store: DynStore) {
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
        let marked = stored
            .push_started_at
            .expect("the push was marked as started");
        assert!(
            stored.claimed_at.unwrap() <= marked && marked < r.scheduled_at.utc(),
            "marked after the claim, before its second (off the critical path)"
        );
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

async fn a_reservation_made_mid_run_still_leaves_on_time(store: DynStore) {
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
// Exactly once

async fn duplicate_and_overlapping_runs_push_once(store: DynStore) {
    let w = World::new(store);
    let mut reservations = Vec::new();
    for i in 0..20 {
        let device = w
            .device(&format!("dup-{i}"), PushEnvironment::Production)
            .await;
        reservations.push(w.reserve(&device, at_ms(11_000 + i * 2_950)).await);
    }
    // An at-least-once delivery: three runs start together; a fourth overlaps them later.
    let mut runs = vec![w.start_run(), w.start_run(), w.start_run()];
    w.step_to(at(30)).await;
    runs.push(w.start_run());
    let reports = w
        .finish(runs, at(30) + w.window() + Duration::seconds(2))
        .await;

    for r in &reservations {
        let pushes = w.push.sent_for_call(r.call_id.as_str());
        assert_eq!(pushes.len(), 1, "{}: {pushes:#?}", r.call_id.as_str());
        assert!(pushes[0].at >= r.scheduled_at.utc(), "never early");
        assert_eq!(w.stored(r).await.unwrap().status, ReservationStatus::Sent);
    }
    assert_eq!(
        w.push.attempts().len(),
        20,
        "no attempt beyond one per call"
    );
    let claimed: u32 = reports.iter().map(|r| r.claimed).sum();
    let sent: u32 = reports.iter().map(|r| r.sent).sum();
    assert_eq!((claimed, sent), (20, 20), "{reports:#?}");
}

async fn overlapping_runs_of_one_process_leave_each_others_calls_alone(store: DynStore) {
    let w = World::new(store);
    let mut reservations = Vec::new();
    for i in 0..20 {
        let device = w
            .device(&format!("own-{i}"), PushEnvironment::Production)
            .await;
        // 11 s .. 95 s: the first run's 70 s window holds the first 14.
        reservations.push(w.reserve(&device, at_ms(11_000 + i * 4_400)).await);
    }
    let in_flight = InFlight::default();
    let first = w.start_run_sharing(&in_flight);
    w.step_to(at(30)).await;
    let second = w.start_run_sharing(&in_flight);
    let reports = w
        .finish(
            vec![first, second],
            at(30) + w.window() + Duration::seconds(2),
        )
        .await;

    for r in &reservations {
        assert_eq!(w.push.sent_for_call(r.call_id.as_str()).len(), 1);
        assert_eq!(w.stored(r).await.unwrap().status, ReservationStatus::Sent);
    }
    let in_first = reservations
        .iter()
        .filter(|r| r.scheduled_at.utc() < at(70))
        .count() as u32;
    assert_eq!(in_first, 14);
    assert_eq!(
        (reports[0].selected, reports[0].sent, reports[0].lost),
        (in_first, in_first, 0),
        "{reports:#?}"
    );
    assert_eq!(
        (reports[1].selected, reports[1].sent, reports[1].lost),
        (20 - in_first, 20 - in_first, 0),
        "the second run takes only what the first does not hold: {reports:#?}"
    );
    assert!(in_flight.is_empty(), "every call released");
}

async fn a_cancel_racing_the_claim_either_wins_or_gets_too_late_never_both(
    store: DynStore,
    per_round: usize,
) {
    let w = World::new(store.clone());
    let clock = w.clock.clone();
    let push = w.push.clone();
    let app = spawn_app_with(&[], |app| {
        app.with_clock(clock.clone())
            .with_store(store.clone())
            .with_push(push.clone())
    })
    .await;

    let rounds = [20, 30, 40, 50, 60];
    let mut calls: HashMap<String, (String, i64)> = HashMap::new(); // device → (callId, second)
    for (round, second) in rounds.iter().enumerate() {
        for i in 0..per_round {
            let device = format!("race-{round}-{i}");
            let body = serde_json::json!({"deviceId": device, "voipToken": "ab".repeat(32)});
            let response = send(
                app.agent(http::Method::PUT, "/devices")
                    .body(body.to_string()),
            )
            .await;
            assert_eq!(response.status(), 200);
            let scheduled = (at(*second)).with_timezone(&FixedOffset::east_opt(9 * 3600).unwrap());
            let body =
                serde_json::json!({"deviceId": device, "scheduledAt": scheduled.to_rfc3339()});
            let response = send(
                app.agent(http::Method::POST, "/calls")
                    .body(body.to_string()),
            )
            .await;
            assert_eq!(response.status(), 201);
            let created: serde_json::Value = response.json().await.unwrap();
            calls.insert(
                device,
                (created["callId"].as_str().unwrap().to_owned(), *second),
            );
        }
    }

    let run = w.start_run();
    let mut outcomes: HashMap<String, u16> = HashMap::new();
    for (round, second) in rounds.iter().enumerate() {
        let claim_at = at(*second) - Duration::from_std(w.settings.claim_lead).unwrap();
        w.step_to(claim_at - STEP).await;
        // The cancels and the claims (woken by the clock) race.
        let cancels: Vec<_> = (0..per_round)
            .map(|i| {
                let device = format!("race-{round}-{i}");
                let request = app.agent(http::Method::DELETE, &format!("/calls?deviceId={device}"));
                tokio::spawn(async move {
                    tokio::time::sleep(StdDuration::from_micros(fastrand::u64(0..2_000))).await;
                    (device, send(request).await.status().as_u16())
                })
            })
            .collect();
        tokio::time::sleep(StdDuration::from_micros(fastrand::u64(0..1_000))).await;
        w.clock.set(claim_at);
        for cancel in cancels {
            let (device, status) = cancel.await.unwrap();
            assert!(status == 204 || status == 409, "{device}: {status}");
            outcomes.insert(device, status);
        }
        w.step_to(at(*second)).await;
        let too_late: Vec<String> = outcomes
            .iter()
            .filter(|(d, s)| **s == 409 && d.starts_with(&format!("race-{round}-")))
            .map(|(d, _)| calls[d].0.clone())
            .collect();
        w.push
            .wait_for(
                "the pushes of the calls cancelled too late",
                PATIENCE,
                |a| {
                    too_late
                        .iter()
                        .all(|call| a.iter().any(|p| &p.call_id == call && p.accepted))
                },
            )
            .await;
    }
    let [report] = w.finish(vec![run], at(72)).await.try_into().unwrap();

    let (mut won, mut too_late) = (0u32, 0u32);
    for (device, status) in &outcomes {
        let (call, second) = &calls[device];
        let pushes = w.push.sent_for_call(call);
        match status {
            204 => {
                won += 1;
                assert!(pushes.is_empty(), "{device}: cancelled (204) yet pushed");
            }
            _ => {
                too_late += 1;
                assert_eq!(pushes.len(), 1, "{device}: 409 TOO_LATE must mean one push");
                assert_eq!(pushes[0].at, at(*second));
            }
        }
    }
    eprintln!(
        "cancel vs claim: {} trials, cancel won {won}, TOO_LATE {too_late}",
        outcomes.len()
    );
    assert_eq!(outcomes.len(), rounds.len() * per_round);
    assert_eq!((report.sent, report.lost), (too_late, won), "{report:?}");
}

async fn a_run_that_died_after_claiming_is_recovered_once_by_a_later_run(store: DynStore) {
    let w = World::new(store);
    let device = w.device("crashed", PushEnvironment::Production).await;
    let r = w.reserve(&device, at(30)).await;
    // A run claims it a moment before its second, then dies (no push, no outcome).
    w.step_to(at_ms(29_500)).await;
    let claim_at = w.clock.now();
    assert!(
        w.store
            .claim_reservation(
                &r.device_id,
                &r.call_id,
                &RunToken::generate(),
                claim_at,
                claim_at - Duration::seconds(30)
            )
            .await
            .unwrap()
    );

    // A run that starts while the claim is fresh leaves it alone.
    w.step_to(at(40)).await;
    let fresh_run = w.start_run();
    w.step_to(at(59)).await;
    tokio::time::sleep(StdDuration::from_millis(30)).await;
    assert!(
        w.push.attempts().is_empty(),
        "a fresh claim is not taken over"
    );

    // Past the claim timeout (30 s), the next run re-sends it, within grace.
    w.step_to(at(61)).await;
    let later_run = w.start_run();
    w.push
        .wait_for("the recovered push", PATIENCE, |a| {
            a.iter().any(|p| p.accepted)
        })
        .await;
    let reports = w.finish(vec![fresh_run, later_run], at(61 + 72)).await;

    let pushes = w.push.sent_for_call(r.call_id.as_str());
    assert_eq!(pushes.len(), 1, "{pushes:#?}");
    assert_eq!(pushes[0].at, at(61), "sent at once by the later run");
    assert_eq!(pushes[0].payload["callId"], r.call_id.as_str());
    assert_eq!(w.stored(&r).await.unwrap().status, ReservationStatus::Sent);
    assert_eq!((reports[0].sent, reports[1].sent), (0, 1), "{reports:#?}");
    assert_eq!(reports[1].lateness_ms, vec![31_000]);
}

async fn a_run_that_died_after_starting_the_push_leaves_it_failed_never_pushed_again(
    store: DynStore,
) {
    let w = World::new(store);
    let device = w.device("died-pushing", PushEnvironment::Production).await;
    let r = w.reserve(&device, at(30)).await;
    // A run claims it, marks its push as started, then dies (the push may have left).
    w.step_to(at_ms(29_500)).await;
    let claimed_at = w.clock.now();
    let abandoned_before = claimed_at - Duration::seconds(30);
    let dead_run = RunToken::generate();
    assert!(
        w.store
            .claim_reservation(
                &r.device_id,
                &r.call_id,
                &dead_run,
                claimed_at,
                abandoned_before
            )
            .await
            .unwrap()
    );
    w.step_to(at_ms(29_800)).await;
    assert!(
        w.store
            .mark_push_started(&r.device_id, &r.call_id, &dead_run, w.clock.now(), false)
            .await
            .unwrap()
    );

    // Past the claim timeout, a later run records it failed without pushing.
    w.step_to(at(61)).await;
    let later_run = w.start_run();
    w.wait_status(&r, ReservationStatus::Failed).await;
    let [report] = w
        .finish(vec![later_run], at(61 + 72))
        .await
        .try_into()
        .unwrap();

    assert!(
        w.push.attempts().is_empty(),
        "never pushed a second time: {:#?}",
        w.push.attempts()
    );
    assert_eq!(
        (report.sent, report.failed, report.claimed),
        (0, 1, 0),
        "{report:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// APNs answers

async fn an_invalid_token_removes_the_device_and_fails_the_call(store: DynStore) {
    let w = World::new(store);
    let bad = w.device("bad-token", PushEnvironment::Production).await;
    let gone = w.device("unregistered", PushEnvironment::Sandbox).await;
    w.push.script("bad-token", [Scripted::bad_device_token()]);
    w.push.script("unregistered", [Scripted::unregistered()]);
    let r_bad = w.reserve(&bad, at(15)).await;
    let r_gone = w.reserve(&gone, at(16)).await;

    let run = w.start_run();
    w.step_to(at(16)).await;
    w.wait_status(&r_bad, ReservationStatus::Failed).await;
    w.wait_status(&r_gone, ReservationStatus::Failed).await;
    let [report] = w.finish(vec![run], at(72)).await.try_into().unwrap();

    for device in [&bad, &gone] {
        assert_eq!(
            w.store
                .get_device(&device.device_id, chrono::Utc::now())
                .await
                .unwrap(),
            None,
            "the rejected token is removed"
        );
    }
    assert_eq!(w.push.attempts().len(), 2, "no retry of a dead token");
    assert!(w.push.sent().is_empty());
    assert_eq!((report.failed, report.tokens_removed), (2, 2), "{report:?}");
}

async fn a_429_then_success_within_the_budget_is_sent(store: DynStore) {
    let w = World::new(store);
    let device = w.device("throttled", PushEnvironment::Production).await;
    w.push.script("throttled", [Scripted::too_many_requests()]);
    let r = w.reserve(&device, at(15)).await;

    let run = w.start_run();
    w.step_to(at(15)).await;
    w.push
        .wait_for("the first (throttled) attempt", PATIENCE, |a| !a.is_empty())
        .await;
    // Backoff waits on the clock: walk it in 10 ms steps through the one-second budget.
    let mut t = at(15);
    while w.push.sent().is_empty() && t < at(16) {
        t += Duration::milliseconds(10);
        w.clock.set(t);
        tokio::time::sleep(StdDuration::from_millis(2)).await;
    }
    let sent = w.push.sent();
    assert_eq!(
        sent.len(),
        1,
        "retried and accepted: {:#?}",
        w.push.attempts()
    );
    assert!(
        sent[0].at > at(15) && sent[0].at < at(16),
        "within the budget"
    );
    w.wait_status(&r, ReservationStatus::Sent).await;
    let [report] = w.finish(vec![run], at(72)).await.try_into().unwrap();
    assert_eq!(w.push.attempts().len(), 2);
    assert_eq!(report.sent, 1);
    assert!(report.lateness_ms[0] > 0 && report.lateness_ms[0] < 1000);
}

async fn server_errors_past_the_budget_and_a_hung_push_fail(store: DynStore) {
    let w = World::new(store);
    let erring = w.device("erring", PushEnvironment::Production).await;
    let hung = w.device("hung", PushEnvironment::Production).await;
    w.push.script("erring", vec![Scripted::server_error(); 50]);
    w.push.script("hung", [Scripted::Hang]);
    let r_err = w.reserve(&erring, at(15)).await;
    let r_hung = w.reserve(&hung, at(15)).await;

    let run = w.start_run();
    w.step_to(at(15)).await;
    w.push
        .wait_for("both first attempts", PATIENCE, |a| a.len() >= 2)
        .await;
    let mut t = at(15);
    while t < at_ms(16_200) {
        t += Duration::milliseconds(10);
        w.clock.set(t);
        tokio::time::sleep(StdDuration::from_millis(1)).await;
    }
    w.wait_status(&r_err, ReservationStatus::Failed).await;
    w.wait_status(&r_hung, ReservationStatus::Failed).await;
    let [report] = w.finish(vec![run], at(72)).await.try_into().unwrap();

    let attempts = w.push.attempts();
    let of = |device: &str| attempts.iter().filter(|p| p.device_id == device).count();
    assert!(of("erring") >= 2, "5xx is retried: {attempts:#?}");
    assert_eq!(of("hung"), 1, "a hung push is not retried past the budget");
    assert!(
        attempts.iter().all(|p| p.at < at(16)),
        "every attempt within the budget"
    );
    assert_eq!(report.failed, 2);
    assert_eq!(
        report.push_unknown, 1,
        "the hung push may have been delivered: {report:?}"
    );
    assert!(
        w.store
            .get_device(&erring.device_id, chrono::Utc::now())
            .await
            .unwrap()
            .is_some(),
        "token kept"
    );
}

/// On the stand-in APNs: a push whose stream is reset after APNs read it may have been
/// delivered, so it is never sent again (the call is `failed`, push state unknown); one refused
/// before it was read (`REFUSED_STREAM`) surely was not, so it is retried and sent.
async fn a_push_apns_may_have_read_is_never_sent_again_one_it_refused_is_retried(store: DynStore) {
    let w = World::new(store);
    let apns = LimitedApns::new(ApnsLimits {
        latency: StdDuration::ZERO,
        jitter: StdDuration::ZERO,
        connect_time: StdDuration::ZERO,
        ..ApnsLimits::default()
    });
    apns.answer_next([Answer::ResetAfterRead, Answer::RefusedStream]);
    let reset = w
        .device("reset-after-read", PushEnvironment::Production)
        .await;
    let refused = w
        .device("refused-stream", PushEnvironment::Production)
        .await;
    let r_reset = w.reserve(&reset, at(15)).await;
    let r_refused = w.reserve(&refused, at(20)).await;

    let run = w.start_run_with(apns.connection());
    w.step_to(at(15)).await;
    w.walk_finely_to(at_ms(16_200)).await;
    w.step_to(at(20)).await;
    w.walk_finely_to(at_ms(21_200)).await;
    let [report] = w.finish(vec![run], at(72)).await.try_into().unwrap();

    let records = apns.records();
    let answers = |r: &Reservation| -> Vec<Answer> {
        let call = call_key(r.call_id.as_str());
        records
            .iter()
            .filter(|x| x.call == call)
            .map(|x| x.answer)
            .collect()
    };
    assert_eq!(
        answers(&r_reset),
        [Answer::ResetAfterRead],
        "read by APNs, then reset: never pushed a second time"
    );
    assert_eq!(
        answers(&r_refused),
        [Answer::RefusedStream, Answer::Accepted],
        "refused before it was read: retried within the budget"
    );
    assert_eq!(apns.stats().delivered, 2, "each phone rings once");
    for (r, status) in [
        (&r_reset, ReservationStatus::Failed),
        (&r_refused, ReservationStatus::Sent),
    ] {
        assert_eq!(w.stored(r).await.map(|s| s.status), Some(status));
    }
    assert_eq!(
        (report.sent, report.failed, report.push_unknown),
        (1, 1, 1),
        "{report:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Overdue

async fn overdue_within_grace_is_sent_at_once_and_beyond_grace_is_missed(store: DynStore) {
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

// ---------------------------------------------------------------------------------------------
// One instantiation per adapter

macro_rules! dispatch_suite {
    (store: $store:expr, race_per_round: $per_round:expr $(,)?) => {
        use std::sync::Arc;

        use koe::store::prelude::*;

        async fn store() -> Arc<dyn Store> {
            Arc::new($store)
        }

        dispatch_suite!(@tests
            pushes_leave_at_their_second_and_never_early,
            a_reservation_made_mid_run_still_leaves_on_time,
            duplicate_and_overlapping_runs_push_once,
            overlapping_runs_of_one_process_leave_each_others_calls_alone,
            a_run_that_died_after_claiming_is_recovered_once_by_a_later_run,
            a_run_that_died_after_starting_the_push_leaves_it_failed_never_pushed_again,
            an_invalid_token_removes_the_device_and_fails_the_call,
            a_429_then_success_within_the_budget_is_sent,
            server_errors_past_the_budget_and_a_hung_push_fail,
            a_push_apns_may_have_read_is_never_sent_again_one_it_refused_is_retried,
            overdue_within_grace_is_sent_at_once_and_beyond_grace_is_missed,
        );

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_cancel_racing_the_claim_either_wins_or_gets_too_late_never_both() {
            super::a_cancel_racing_the_claim_either_wins_or_gets_too_late_never_both(
                store().await,
                $per_round,
            )
            .await;
        }
    };
    (@tests $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name(store().await).await;
            }
        )*
    };
}

mod memory {
    dispatch_suite!(
        store: koe::store::memory::MemoryStore::new(),
        race_per_round: 20,
    );
}

/// DynamoDB Local (testkit's, started once per test process), fresh tables from `template.yaml` per test.
mod dynamodb {
    dispatch_suite!(
        store: koe_testkit::dynamodb::fresh_store().await,
        race_per_round: 8,
    );
}
