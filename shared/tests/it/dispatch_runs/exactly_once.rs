//! Exactly once: overlapping runs, a racing cancel and dead runs never push a call twice.

use std::collections::HashMap;
use std::time::Duration as StdDuration;

use chrono::{Duration, FixedOffset};
use koe::dispatch::{InFlight, RunReport};
use koe::domain::device::PushEnvironment;
use koe::domain::reservation::{Reservation, ReservationStatus, RunToken};
use koe::platform::clock::Clock;
use koe::store::{ClaimAnswer, ClaimMark};
use koe_testkit::harness::{send, spawn_app_with};

use crate::dispatch_world::{DynStore, PATIENCE, STEP, World, at, at_ms};

/// Twenty calls of devices `{prefix}-{i}`, the first due at 11 s, each `every_ms` after the last.
async fn twenty_calls(w: &World, prefix: &str, every_ms: i64) -> Vec<Reservation> {
    let mut reservations = Vec::new();
    for i in 0..20 {
        let device = w
            .device(&format!("{prefix}-{i}"), PushEnvironment::Production)
            .await;
        reservations.push(w.reserve(&device, at_ms(11_000 + i * every_ms)).await);
    }
    reservations
}

pub(super) async fn duplicate_and_overlapping_runs_push_once(store: DynStore) {
    let w = World::new(store);
    let reservations = twenty_calls(&w, "dup", 2_950).await;
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

pub(super) async fn overlapping_runs_of_one_process_leave_each_others_calls_alone(store: DynStore) {
    let w = World::new(store);
    // 11 s .. 95 s: the first run's 70 s window holds the first 14.
    let reservations = twenty_calls(&w, "own", 4_400).await;
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

pub(super) async fn a_cancel_racing_the_claim_either_wins_or_gets_too_late_never_both(
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

/// A run that dies after its claim in its batch (a device without `confirmsCalls`), before its
/// batch's mark: no push left. A run while the claim is fresh leaves it; past the claim timeout
/// the next run fences the stopped run's batch, settles the claim and sends it, once, within
/// grace (SPEC: "A run that dies between claim and send: the next run re-sends within grace").
pub(super) async fn a_run_that_died_after_claiming_in_its_batch_leaves_it_to_the_next_run(
    store: DynStore,
) {
    let w = World::new(store);
    let device = w.device("crashed", PushEnvironment::Production).await;
    let r = w.reserve(&device, at(30)).await;
    let dead_run = RunToken::generate();
    claimed_in_batch(&w, &r, &dead_run).await;

    // A run that starts while the claim is fresh leaves it alone.
    w.step_to(at(40)).await;
    let fresh_run = w.start_run();
    w.step_to(at(59)).await;
    tokio::time::sleep(StdDuration::from_millis(30)).await;
    assert!(
        w.push.attempts().is_empty(),
        "a fresh claim is not taken over"
    );

    // Past the claim timeout (30 s), the next run fences the batch and sends it.
    w.step_to(at(61)).await;
    let later_run = w.start_run();
    w.wait_status(&r, ReservationStatus::Sent).await;
    let reports = w.finish(vec![fresh_run, later_run], at(61 + 72)).await;
    let attempts = w.push.attempts();
    assert_eq!(attempts.len(), 1, "pushed once: {attempts:#?}");
    assert!(attempts[0].at <= r.scheduled_at.utc() + Duration::seconds(120));
    assert_eq!(
        (reports[0].sent, reports[1].sent, reports[1].failed),
        (0, 1, 0),
        "{reports:#?}"
    );
    // The stopped run's mark, made late, is refused: its batch is fenced.
    let late = w.clock.now();
    let marked = w.store.mark_batch(&dead_run, at(30), late).await.unwrap();
    assert!(!marked, "a fenced batch is never marked");
}

/// A run that dies after its batch's mark, to a device without `confirmsCalls`: the push may
/// have left as far as anyone can tell. Past the claim timeout the next run fences the batch,
/// finds it marked, and records the call `failed` (push state unknown), never pushes.
pub(super) async fn a_run_that_died_after_its_batch_mark_leaves_it_failed_never_pushed(
    store: DynStore,
) {
    let w = World::new(store);
    let device = w
        .device("crashed-marked", PushEnvironment::Production)
        .await;
    let r = w.reserve(&device, at(30)).await;
    let dead_run = RunToken::generate();
    claimed_in_batch(&w, &r, &dead_run).await;
    w.step_to(at(30)).await;
    let marked = w.store.mark_batch(&dead_run, at(30), w.clock.now()).await;
    assert!(marked.unwrap());

    let report = failed_unpushed_by_a_later_run(&w, &r).await;
    assert_eq!(
        (report.sent, report.failed, report.push_unknown),
        (0, 1, 1),
        "{report:#?}"
    );
}

/// Two claims in batches a stopped run left, found only past grace (no run came meanwhile): the
/// next run fences each batch and settles each claim; the one whose batch was marked (its push
/// may have left) ends `failed`, push state unknown; the other `missed`. Neither is pushed.
pub(super) async fn claims_in_batches_found_past_grace_end_by_their_marks(store: DynStore) {
    let w = World::new(store);
    let marked = w.device("late-marked", PushEnvironment::Production).await;
    let unmarked = w.device("late-unmarked", PushEnvironment::Production).await;
    let rm = w.reserve(&marked, at(30)).await;
    let ru = w.reserve(&unmarked, at(31)).await;
    let dead_run = RunToken::generate();
    claimed_in_batch(&w, &rm, &dead_run).await;
    claimed_in_batch(&w, &ru, &dead_run).await;
    w.step_to(at(30)).await;
    let mark = w.store.mark_batch(&dead_run, at(30), w.clock.now()).await;
    assert!(mark.unwrap());

    // Grace is 120 s: a run at 160 s finds both past it.
    w.step_to(at(160)).await;
    let run = w.start_run();
    w.wait_status(&rm, ReservationStatus::Failed).await;
    w.wait_status(&ru, ReservationStatus::Missed).await;
    let [report] = w.finish(vec![run], at(160 + 72)).await.try_into().unwrap();
    assert!(w.push.attempts().is_empty(), "{:#?}", w.push.attempts());
    assert_eq!(
        (report.push_unknown, report.missed, report.sent),
        (1, 1, 0),
        "{report:#?}"
    );
}

/// A run at 61 s, past the claim timeout of a run that died holding `r`: it records `r` failed
/// and never pushes it. The run's report.
async fn failed_unpushed_by_a_later_run(w: &World, r: &Reservation) -> RunReport {
    w.step_to(at(61)).await;
    let later_run = w.start_run();
    w.wait_status(r, ReservationStatus::Failed).await;
    let [report] = w
        .finish(vec![later_run], at(61 + 72))
        .await
        .try_into()
        .unwrap();
    assert!(
        w.push.attempts().is_empty(),
        "never pushed: {:#?}",
        w.push.attempts()
    );
    report
}

/// `run`'s claim of `r` in its batch, half a second before its second, as a run makes it.
async fn claimed_in_batch(w: &World, r: &Reservation, run: &RunToken) {
    w.step_to(r.scheduled_at.utc() - Duration::milliseconds(500))
        .await;
    let claim_at = w.clock.now();
    let claim = w
        .store
        .claim_due(
            &r.device_id,
            &r.call_id,
            run,
            claim_at,
            claim_at - Duration::seconds(30),
            ClaimMark::InBatch(r.scheduled_at.utc()),
        )
        .await
        .unwrap();
    assert!(matches!(claim, ClaimAnswer::Won { pushes: 0 }), "{claim:?}");
}

pub(super) async fn a_run_that_died_after_starting_the_push_leaves_it_failed_never_pushed_again(
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

    let report = failed_unpushed_by_a_later_run(&w, &r).await;
    assert_eq!(
        (report.sent, report.failed, report.claimed),
        (0, 1, 0),
        "{report:?}"
    );
}
