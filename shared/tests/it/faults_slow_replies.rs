//! Replies that come too late, on DynamoDB Local: `reply_drop`'s proxy lets each write happen at
//! once and holds its answer back 1.5 s, past the dispatcher's attempt timeout (500 ms), so the
//! dispatcher cannot tell a write that happened from one that did not. Its run makes each such
//! request again with its own token until answered, and carries on: every call rings once, by
//! that run, never early, and none ends `failed` while its run knows its push did not leave.
//! How late is printed, not asserted (a busy machine changes it): the timing of held replies
//! is asserted on paused time in `dispatch_held_replies`, and measured by `bench/slow-replies.sh`.

use std::time::{Duration as StdDuration, Instant};

use chrono::{DateTime, Utc};
use koe::domain::reservation::{Reservation, ReservationStatus};
use koe::store::dynamodb::DISPATCH_ATTEMPT_TIMEOUT;
use koe_testkit::dispatching::ProxiedWorld as World;
use koe_testkit::faults;

const CLAIM_TIMEOUT: StdDuration = StdDuration::from_secs(30);
/// How long a held reply takes: past the attempt timeout, as in the measurement.
const HOLD: StdDuration = StdDuration::from_millis(1500);
/// A piece of each dispatch request's body, to hold just that request.
const CLAIM: &str = "#claimedAtMs = :nowMs";
/// The push mark of a device that confirms its calls: a write of its own.
const MARK: &str = "if_not_exists(#pushStartedAtMs";
/// What a batch's mark's request body holds.
const BATCH_MARK: &str = "if_not_exists(#markedAtMs";
const FINISH: &str = "#finishToken = :run";

/// How late (ms) each call's accepted pushes left, one entry per push.
fn lateness(w: &World, calls: &[Reservation]) -> Vec<Vec<i64>> {
    calls
        .iter()
        .map(|r| {
            w.push
                .sent_for_call(r.call_id.as_str())
                .iter()
                .map(|p| (p.at - r.scheduled_at.utc()).num_milliseconds())
                .collect()
        })
        .collect()
}

/// What one held step came to: how late (ms) the call's one push left, when it left, and when
/// each of the held operation's requests was answered (the held ones 1.5 s after they were made).
struct Held {
    late: i64,
    pushed_at: DateTime<Utc>,
    answered: Vec<DateTime<Utc>>,
}

/// One call whose `operation` requests with `needle` get their reply 1.5 s late, three times
/// in a row: the run resolves the write by making it again and the call rings once, by this
/// run, never early. Its device confirms its calls if `confirms` (then the call is due again
/// after its push, waiting for a confirmation).
async fn one_held_step(name: &str, operation: &str, needle: impl Fn(&World) -> String) -> Held {
    held_step(name, operation, needle, false).await
}

/// A call due in `in_ms` whose device confirms its calls if `confirms`.
async fn reserve(w: &World, name: &str, in_ms: i64, confirms: bool) -> Reservation {
    match confirms {
        true => w.reserve_confirming(name, in_ms).await,
        false => w.reserve(name, in_ms).await,
    }
}

async fn held_step(
    name: &str,
    operation: &str,
    needle: impl Fn(&World) -> String,
    confirms: bool,
) -> Held {
    assert!(HOLD > DISPATCH_ATTEMPT_TIMEOUT);
    let w = World::new().await;
    let r = reserve(&w, name, 2500, confirms).await;
    let needle = needle(&w);
    w.dropper.hold_replies(operation, &needle, 3, HOLD);
    let watch = w.dropper.watch(&[(operation, needle.as_str())]);
    let report = w.run(CLAIM_TIMEOUT).await;
    assert_eq!(w.dropper.dropped(), 3, "{name}: every hold happened");
    let [late] = lateness(&w, std::slice::from_ref(&r))[0][..] else {
        panic!("{name}: not exactly one push: {:#?}", w.push.attempts());
    };
    assert!(late >= 0, "{name}: never early: {late} ms");
    assert_eq!(w.push.attempts().len(), 1, "{name}: one push in all");
    let status = match confirms {
        true => ReservationStatus::Scheduled,
        false => ReservationStatus::Sent,
    };
    assert_eq!(w.stored(&r).await.status, status, "{name}");
    assert_eq!(
        (report.sent, report.failed, report.store_errors),
        (1, 0, 0),
        "{name}: {report:?}"
    );
    assert!(report.resolved >= 1, "{name}: {report:?}");
    // The proxy's instants read on the wall clock the pushes are recorded on.
    let (instant, wall) = (Instant::now(), Utc::now());
    let answered = watch
        .answered()
        .into_iter()
        .map(|at| wall - chrono::Duration::from_std(instant - at).expect("a short test"))
        .collect();
    Held {
        late,
        pushed_at: w.push.sent_for_call(r.call_id.as_str())[0].at,
        answered,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_replies_come_late_is_the_runs_own_and_rings_once() {
    let Held { late, .. } = one_held_step("held-claim", "UpdateItem", |_| CLAIM.into()).await;
    faults::record(
        "DynamoDB: a dispatch claim's replies come 1.5 s late, three times (written at once)",
        "the run makes the claim again with its token until answered: its own claim; one push",
        &format!("sent once, {late} ms late, 0 failed"),
    );
}

/// A device without `confirmsCalls`: its batch's mark, written at once, answered late three
/// times; the run makes it again (its own mark, the first time kept) and pushes, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_mark_whose_replies_come_late_is_pushed_by_its_run_once() {
    let Held { late, .. } = held_step(
        "held-batch-mark",
        "UpdateItem",
        |_| BATCH_MARK.into(),
        false,
    )
    .await;
    faults::record(
        "DynamoDB: a batch's push mark's replies come 1.5 s late, three times (written at once)",
        "the run makes the mark again until answered (its own, kept) and pushes: one push",
        &format!("sent once, {late} ms late, 0 failed"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_mark_whose_replies_come_late_is_pushed_by_its_run_once() {
    // A device that confirms its calls: the mark is a write of its own (for any other device
    // it is its batch's, made at the second).
    let Held { late, .. } = held_step("held-mark", "UpdateItem", |_| MARK.into(), true).await;
    faults::record(
        "DynamoDB: a push mark's replies come 1.5 s late, three times (written at once)",
        "the run makes the mark again until answered and pushes (it knows it has not): one push",
        &format!("sent once, {late} ms late, 0 failed"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_whose_replies_come_late_is_recorded_once() {
    let held = one_held_step("held-finish", "UpdateItem", |_| FINISH.into()).await;
    let (late, first_answer) = (held.late, held.answered[0]);
    assert!(
        held.pushed_at < first_answer,
        "the push is not held up behind its outcome: it must leave before the outcome's first \
         reply ({first_answer}); it left at {}",
        held.pushed_at
    );
    faults::record(
        "DynamoDB: a dispatch outcome's replies come 1.5 s late, three times (written at once)",
        "made again with the run's token, the outcome is recognised as written: sent, one push",
        &format!("sent once, {late} ms late, recorded sent"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_read_whose_replies_come_late_is_read_again_and_rings_once() {
    let devices_table = |w: &World| format!("\"{}\"", w.tables.devices);
    // Read 2 s ahead, its holds waited out before the second: on paused time in
    // `dispatch_held_replies::a_device_read_whose_replies_come_late_leaves_its_push_on_time`.
    one_held_step("held-device", "GetItem", devices_table).await;
}

/// Eight calls due in the same second, and every reply DynamoDB sends in a slow window around
/// it comes 1.5 s late (the two measurements: a window over the push marks, and one
/// starting before the claims). Every call rings once, never early; none fails. (Within 5 s of
/// its second, on paused time: `dispatch_held_replies`.) The run starts 2.5 s before the
/// second, its first selection before the slow window, however long the reservations took (a
/// busy machine's: 3 s once, and the run then selected nothing in its window).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowded_second_in_a_slow_window_rings_every_call_once() {
    for (from_ms, until_ms) in [(-200, 4_000), (-1_500, 3_500)] {
        let w = World::new().await;
        let start = Utc::now() + chrono::Duration::seconds(10);
        let second = DateTime::from_timestamp(start.timestamp(), 500_000_000).unwrap();
        let mut calls = Vec::new();
        for i in 0..8 {
            let in_ms = (second - Utc::now()).num_milliseconds();
            calls.push(w.reserve(&format!("slow-{i}"), in_ms).await);
        }
        let at = |ms: i64| {
            let from_now = second + chrono::Duration::milliseconds(ms) - Utc::now();
            Instant::now() + from_now.to_std().unwrap_or_default()
        };
        w.dropper
            .hold_replies_between("", HOLD, at(from_ms), at(until_ms));
        tokio::time::sleep_until(at(-2_500).into()).await;
        let report = w.run(CLAIM_TIMEOUT).await;
        let late = lateness(&w, &calls);
        let window = format!("slow window {from_ms}..{until_ms} ms around the second");
        assert!(w.dropper.dropped() > 0, "{window}: replies were held");
        assert!(
            late.iter().all(|l| l.len() == 1),
            "{window}: each call once: {late:?}"
        );
        let worst = late.iter().flatten().max().copied().unwrap();
        let earliest = late.iter().flatten().min().copied().unwrap();
        assert!(earliest >= 0, "{window}: never early: {late:?}");
        for r in &calls {
            assert_eq!(
                w.stored(r).await.status,
                ReservationStatus::Sent,
                "{window}"
            );
        }
        assert_eq!((report.sent, report.failed), (8, 0), "{window}: {report:?}");
        faults::record(
            &format!("DynamoDB: every reply 1.5 s late in a {window}; 8 calls due in it"),
            "each held write made again by its run until answered: all ring once, never early",
            &format!(
                "8 of 8 rang once, worst {worst} ms late, {} replies held, {} requests resolved",
                w.dropper.dropped(),
                report.resolved
            ),
        );
    }
}

/// A run that cannot get its push mark answered while its claim is surely its own (half the
/// claim timeout) gives the claim back instead of leaving it to end `failed`: it knows its push
/// did not leave. The next run sends the call, once. A device that confirms its calls: the mark
/// is a write of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_mark_never_gets_an_answer_is_given_back_and_sent_by_the_next_run() {
    // Every mark's reply late (each mark is written: the record holds it until given back).
    let (w, r, first) = given_back_then_sent_by_the_next_run("mark-never-answered", true).await;
    assert_eq!(
        (first.claimed, first.released, first.failed),
        (1, 1, 0),
        "{first:?}"
    );
    assert_eq!(w.stored(&r).await.pushes, 1);
    faults::record(
        "DynamoDB: a push mark never gets an answer in time (every reply 1.5 s late)",
        "the run gives its claim back unpushed (not failed); the next run sends it once",
        "first run: released 1, no push; second run: sent once",
    );
}

/// The same for a device without `confirmsCalls`, whose push mark is its batch's: a batch mark
/// that never gets an answer may have been written; its run knows it did not push, so it gives
/// the claim back rather than leave it to end `failed` (push state unknown). The next run sends
/// the call, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_mark_that_never_gets_an_answer_is_given_back_and_sent_by_the_next_run() {
    // Every batch mark's reply late (each is written).
    let (w, r, first) = given_back_then_sent_by_the_next_run("batch-never-answered", false).await;
    assert_eq!(
        (
            first.claimed,
            first.released,
            first.failed,
            first.unresolved
        ),
        (1, 1, 0, 1),
        "{first:?}"
    );
    assert_eq!(w.stored(&r).await.status, ReservationStatus::Sent);
    faults::record(
        "DynamoDB: a batch's push mark never gets an answer in time (every reply 1.5 s late)",
        "the run gives its claim back unpushed (not failed); the next run sends it once",
        "first run: released 1, no push; second run: sent once",
    );
}

/// A call due in 1.5 s (its device confirms its calls if `confirms`) whose every reply with a
/// push mark is held (claim timeout 4 s): the first run pushes nothing and gives it back; the
/// store answers again and the next run pushes it at once (within grace), once. The world, the
/// call and the first run's report.
async fn given_back_then_sent_by_the_next_run(
    name: &str,
    confirms: bool,
) -> (World, Reservation, koe::dispatch::RunReport) {
    let w = World::new().await;
    let r = reserve(&w, name, 1500, confirms).await;
    let claim_timeout = StdDuration::from_secs(4);
    let mark = if confirms { MARK } else { BATCH_MARK };
    w.dropper.hold_replies("UpdateItem", mark, usize::MAX, HOLD);
    let first = w.run(claim_timeout).await;
    assert!(w.push.attempts().is_empty(), "{:#?}", w.push.attempts());
    given_back(&w, &r).await;

    w.dropper.clear();
    let second = w.run(claim_timeout).await;
    let pushes = w.push.sent_for_call(r.call_id.as_str());
    assert_eq!(pushes.len(), 1, "{pushes:#?}");
    assert_eq!(pushes[0].payload["attempt"], 1);
    assert_eq!(w.push.attempts().len(), 1, "one push in all");
    assert_eq!((second.sent, second.failed), (1, 0), "{second:?}");
    (w, r, first)
}

/// `r` given back: `scheduled` again, its claim and mark removed.
async fn given_back(w: &World, r: &Reservation) {
    let given_back = w.stored(r).await;
    assert_eq!(
        (
            given_back.status,
            given_back.push_started_at,
            given_back.claimed_by
        ),
        (ReservationStatus::Scheduled, None, None),
        "scheduled again, its mark removed"
    );
}
