//! APNs answers: invalid tokens, 429s, server errors, hung and reset pushes.

use std::time::Duration as StdDuration;

use chrono::Duration;
use koe::domain::device::PushEnvironment;
use koe::domain::reservation::{Reservation, ReservationStatus};
use koe_testkit::push::Scripted;
use koe_testkit::push::limited::{Answer, ApnsLimits, LimitedApns, call_key};

use crate::dispatch_world::{DynStore, PATIENCE, World, at, at_ms};

pub(super) async fn an_invalid_token_removes_the_device_and_fails_the_call(store: DynStore) {
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
    assert_eq!(
        (report.failed, report.dead_tokens, report.tokens_removed),
        (2, 2, 2),
        "failed, and counted apart as dead tokens: {report:?}"
    );
}

pub(super) async fn a_429_then_success_within_the_budget_is_sent(store: DynStore) {
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

pub(super) async fn server_errors_past_the_budget_and_a_hung_push_fail(store: DynStore) {
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
    // The budget (1 s), then the hung push's answer awaited (`ANSWER_WAIT`, 2 s).
    let mut t = at(15);
    while t < at_ms(18_200) {
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
    assert_eq!(report.dead_tokens, 0, "APNs 5xx and no answer are ours");
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
pub(super) async fn a_push_apns_may_have_read_is_never_sent_again_one_it_refused_is_retried(
    store: DynStore,
) {
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
