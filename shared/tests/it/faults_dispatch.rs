//! Fault injection on the dispatcher, end to end and in real time: the dispatch Lambda's own
//! entrypoint (`koe::app::lambda::dispatch::handle`) gets the committed schedule event
//! (`events/dispatch-schedule.json`), on DynamoDB Local, with a stand-in APNs
//! (`koe_testkit::push`) answering as APNs does when things go wrong, behind the same
//! `PushSender` port (how the APNs client itself classifies each fault: `apns_errors.rs`).
//!
//! Expected (SPEC "Dispatch", docs/dispatch.md, "Exactly once"): 400 `BadDeviceToken` and 410
//! `Unregistered` remove the device's token and fail the call at once. 429 and 5xx are retried
//! with backoff within 1 s of the second, then fail (the token is kept). The same event
//! delivered twice, with an overlapping run on top, still means one push per call. A run killed
//! after its claim and before its push is left alone while its claim is fresh; after the claim
//! timeout, the next run sends it, within grace, one push: for a device without `confirmsCalls`
//! once it has fenced the claim's batch (its mark, made when the push is due, never written),
//! for one that confirms its calls (claim and mark apart) killed before the mark. A run killed
//! before its claim leaves the call to the next run, which sends it.
//!
//! The runs are shortened (3 s window, re-selection every 500 ms, 4 s claim timeout) so the test
//! takes seconds; everything else is the deployed configuration.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, FixedOffset, Utc};
use koe::App;
use koe::app::ports::Adapters;
use koe::dispatch::api::Dispatch;
use koe::domain::device::{AlertToken, Device, PushEnvironment};
use koe::domain::reservation::{Reservation, ReservationStatus, ScheduledAt};
use koe::platform::config::{Config, DispatchConfig, Vars};
use koe_testkit::dynamodb::fresh_store;
use koe_testkit::faults;
use koe_testkit::push::{RecordedPush, RecordingPushSender, Scripted};
use koe_testkit::template::repo_root;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;

const CLAIM_TIMEOUT: StdDuration = StdDuration::from_secs(4);

/// One invocation of the dispatch function running on `app`'s adapters.
async fn handle(app: &App, event: LambdaEvent<Value>) -> Result<Value, lambda_runtime::Error> {
    let service = app.service::<Dispatch>().await.unwrap();
    koe::app::lambda::dispatch::handle(&service, event).await
}

fn schedule_event() -> LambdaEvent<Value> {
    let path = repo_root().join("events/dispatch-schedule.json");
    let payload = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    LambdaEvent::new(payload, Context::default())
}

async fn dispatch_app() -> (Arc<App>, Arc<RecordingPushSender>) {
    let app = App::local(Vars::from_pairs(&[])).with_dispatch_settings(settings());
    let app = app.with_store(Arc::new(fresh_store().await));
    let push = Arc::new(RecordingPushSender::new(app.clock()));
    (Arc::new(app.with_push(push.clone())), push)
}

/// A 3 s window re-selecting every 500 ms, with a short claim timeout.
fn settings() -> DispatchConfig {
    let mut settings = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    settings.window = StdDuration::from_secs(3);
    settings.reselect_every = StdDuration::from_millis(500);
    settings.claim_timeout = CLAIM_TIMEOUT;
    settings
}

/// Another execution environment of the same function: its own `App` (so nothing shared in
/// memory with `app`), the same table and APNs.
async fn another_container(app: &App, push: &Arc<RecordingPushSender>) -> App {
    App::local(Vars::from_pairs(&[]))
        .with_dispatch_settings(settings())
        .with_store(app.store().await.unwrap())
        .with_push(push.clone())
}

async fn device(app: &App, name: &str) -> Device {
    let device = koe_testkit::devices::device(name, PushEnvironment::Production, Utc::now());
    app.store()
        .await
        .unwrap()
        .put_device(&device)
        .await
        .unwrap();
    device
}

/// The device's record as stored now.
async fn stored_device(app: &App, device: &Device) -> Option<Device> {
    let store = app.store().await.unwrap();
    let now = Utc::now();
    store.get_device(&device.device_id, now).await.unwrap()
}

async fn reserve(app: &App, device: &Device, at: DateTime<Utc>) -> Reservation {
    let jst = FixedOffset::east_opt(9 * 3600).unwrap();
    let now = Utc::now();
    let r = Reservation::new(
        device.device_id.clone(),
        ScheduledAt::from_stored(at.with_timezone(&jst)),
        Some("こえ".into()),
        now,
    );
    app.store()
        .await
        .unwrap()
        .create_reservation(&r, now, now - Duration::seconds(150))
        .await
        .unwrap();
    r
}

async fn status(app: &App, r: &Reservation) -> ReservationStatus {
    app.store()
        .await
        .unwrap()
        .get_reservation(&r.device_id, Utc::now())
        .await
        .unwrap()
        .expect("the reservation is there")
        .status
}

fn attempts_of(pushes: &[RecordedPush], device: &Device) -> Vec<RecordedPush> {
    pushes
        .iter()
        .filter(|p| p.device_id == device.device_id.as_str())
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apns_failures_and_duplicated_overlapping_runs() {
    let (app, push) = dispatch_app().await;
    let ok = device(&app, "fault-ok").await;
    let bad = device(&app, "fault-bad-token").await;
    let gone = device(&app, "fault-unregistered").await;
    let throttled = device(&app, "fault-429").await;
    let failing = device(&app, "fault-500").await;
    push.script("fault-bad-token", [Scripted::bad_device_token()]);
    push.script("fault-unregistered", [Scripted::unregistered()]);
    push.script("fault-429", [Scripted::too_many_requests()]);
    push.script("fault-500", vec![Scripted::server_error(); 100]);

    let second = Utc::now() + Duration::milliseconds(2500);
    let mut calls = Vec::new();
    for d in [&ok, &bad, &gone, &throttled, &failing] {
        calls.push(reserve(&app, d, second).await);
    }

    // The schedule event twice at once (EventBridge delivers at least once), and a third run
    // overlapping them; Lambda runs each in its own execution environment.
    let (app_b, app_c) = (
        another_container(&app, &push).await,
        another_container(&app, &push).await,
    );
    let third = async {
        tokio::time::sleep(StdDuration::from_millis(700)).await;
        handle(&app_c, schedule_event()).await
    };
    let (a, b, c) = tokio::join!(
        handle(&app, schedule_event()),
        handle(&app_b, schedule_event()),
        third
    );
    let summaries = [a.unwrap(), b.unwrap(), c.unwrap()];
    let total = |key: &str| {
        summaries
            .iter()
            .map(|s| s[key].as_u64().unwrap())
            .sum::<u64>()
    };
    let attempts = push.attempts();

    // Every call was claimed once, by one of the runs; the others lost the claim.
    assert_eq!(total("claimed"), 5, "{summaries:?}");
    assert!(
        total("lost") >= 5,
        "the runs raced for the claims: {summaries:?}"
    );
    assert_eq!(total("sent"), 2, "{summaries:?}");
    assert_eq!(total("failed"), 3, "{summaries:?}");
    for (r, d) in calls.iter().zip([&ok, &bad, &gone, &throttled, &failing]) {
        let accepted: Vec<_> = attempts_of(&attempts, d)
            .into_iter()
            .filter(|p| p.accepted)
            .collect();
        let expected = usize::from(d == &ok || d == &throttled);
        assert_eq!(
            accepted.len(),
            expected,
            "{}: {accepted:#?}",
            r.call_id.as_str()
        );
        assert!(
            attempts_of(&attempts, d).iter().all(|p| p.at >= second),
            "never early"
        );
    }
    faults::record(
        "Dispatch: schedule event delivered twice + an overlapping run",
        "every call claimed by exactly one run; one push per call",
        &format!(
            "3 runs: {} claims for 5 calls, {} claims lost; accepted pushes per call: 1 (or 0 if failed)",
            total("claimed"),
            total("lost")
        ),
    );

    // 400 BadDeviceToken and 410 Unregistered: one attempt, call failed, token removed.
    for (d, r, name, answer) in [
        (&bad, &calls[1], "APNs: 400 BadDeviceToken", "400"),
        (&gone, &calls[2], "APNs: 410 Unregistered", "410"),
    ] {
        assert_eq!(
            attempts_of(&attempts, d).len(),
            1,
            "no retry of a dead token"
        );
        assert_eq!(status(&app, r).await, ReservationStatus::Failed);
        assert_eq!(stored_device(&app, d).await, None);
        faults::record(
            name,
            "call failed at once, the device's token removed (POST /calls then 409 until re-registered)",
            &format!("APNs {answer} once: 1 attempt, call failed, device removed"),
        );
    }

    // 429 then accepted: retried inside the budget and sent. The budget is the dispatcher's,
    // on the clock the attempts are recorded on, from the later of the second and the push's
    // start: a busy machine leaves fewer attempts in it, never a wider span.
    let tries = attempts_of(&attempts, &throttled);
    assert_eq!(tries.len(), 2, "{tries:#?}");
    assert_eq!(status(&app, &calls[3]).await, ReservationStatus::Sent);
    let late = (tries[1].at - second).num_milliseconds();
    let retry_after = (tries[1].at - tries[0].at).num_milliseconds();
    assert!(
        retry_after < 1000,
        "retried within the 1 s budget: {retry_after} ms"
    );
    faults::record(
        "APNs: 429 TooManyRequests, then accepted",
        "retried with backoff within 1 s of the second: sent",
        &format!("2 attempts, sent {late} ms after its second"),
    );

    // 500 every time: retried until the budget is spent, then failed; the token is kept.
    let tries = attempts_of(&attempts, &failing);
    assert!(tries.len() >= 2, "retried: {tries:#?}");
    let span = (tries.last().unwrap().at - tries[0].at).num_milliseconds();
    assert!(span < 1000, "all attempts within the 1 s budget: {span} ms");
    assert_eq!(status(&app, &calls[4]).await, ReservationStatus::Failed);
    assert!(stored_device(&app, &failing).await.is_some());
    faults::record(
        "APNs: 500 InternalServerError, every time",
        "retried with backoff until 1 s after the second, then failed; token kept",
        &format!(
            "{} attempts over {span} ms, call failed, device kept",
            tries.len()
        ),
    );
}

/// A run of `app` that claims `r` (0.5 s before its second) and is killed then, before it
/// pushes; a run that starts while the claim is fresh leaves it. When it was killed.
async fn killed_after_its_claim(
    app: &Arc<App>,
    push: &RecordingPushSender,
    r: &Reservation,
) -> DateTime<Utc> {
    let run = {
        let app = app.clone();
        tokio::spawn(async move { handle(&app, schedule_event()).await })
    };
    let deadline = std::time::Instant::now() + StdDuration::from_secs(10);
    while status(app, r).await != ReservationStatus::Claimed {
        assert!(
            std::time::Instant::now() < deadline,
            "the run claims the call"
        );
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    run.abort();
    let _ = run.await;
    let killed_at = Utc::now();
    assert!(push.sent().is_empty(), "killed before a push went out");

    // A run that starts while the claim is fresh leaves it to the recovery.
    let fresh = handle(app, schedule_event()).await.unwrap();
    assert_eq!(fresh["sent"], 0, "{fresh}");
    assert_eq!(status(app, r).await, ReservationStatus::Claimed);
    assert!(push.sent().is_empty());
    killed_at
}

/// `d` stored (as the test changed it), its call reserved 2 s ahead, and a run killed after
/// its claim ([`killed_after_its_claim`]): the call, its second, when the run was killed, and
/// the record as the killed run left it.
async fn a_call_whose_run_was_killed_after_its_claim(
    app: &Arc<App>,
    push: &RecordingPushSender,
    d: &Device,
) -> (Reservation, DateTime<Utc>, DateTime<Utc>, Reservation) {
    app.store().await.unwrap().put_device(d).await.unwrap();
    let second = Utc::now() + Duration::milliseconds(2000);
    let r = reserve(app, d, second).await;
    let killed_at = killed_after_its_claim(app, push, &r).await;
    let claimed = app.store().await.unwrap();
    let claimed = claimed.get_reservation(&r.device_id, Utc::now()).await;
    (r, second, killed_at, claimed.unwrap().unwrap())
}

/// Once the killed run's claim is older than the claim timeout, the next run sends `r`'s call,
/// within grace (past it a call is `missed`, never pushed): one push, failing none, never
/// early. The push, and how many ms after `second` it left.
async fn recovered_once(
    app: &App,
    push: &RecordingPushSender,
    r: &Reservation,
    second: DateTime<Utc>,
    killed_at: DateTime<Utc>,
) -> (RecordedPush, i64) {
    until_abandoned(killed_at).await;
    let recovery = handle(app, schedule_event()).await.unwrap();
    assert_eq!(
        (&recovery["sent"], &recovery["failed"]),
        (&Value::from(1), &Value::from(0)),
        "{recovery}"
    );
    let mut pushes = push.sent();
    assert_eq!(pushes.len(), 1, "{pushes:#?}");
    assert_eq!(pushes[0].payload["callId"], r.call_id.as_str());
    let late = (pushes[0].at - second).num_milliseconds();
    assert!(late >= 0, "never early: {late} ms");
    (pushes.remove(0), late)
}

/// What the fault table records of such a recovery.
fn recovered_in(late: i64) -> String {
    format!(
        "fresh-claim run sent 0; recovery run sent 1, {late} ms after its second (claim timeout \
         4 s here); 1 push in all"
    )
}

/// Waits until the claim made by the run killed at `killed_at` is abandoned (the claim timeout).
async fn until_abandoned(killed_at: DateTime<Utc>) {
    let claim_age = Utc::now() - killed_at;
    let wait = Duration::from_std(CLAIM_TIMEOUT).unwrap() + Duration::milliseconds(300) - claim_age;
    if wait > Duration::zero() {
        tokio::time::sleep(wait.to_std().unwrap()).await;
    }
}

/// A device without `confirmsCalls`: its claim names its batch, whose one mark is written at
/// the second, so a run killed after the claim (0.5 s before) has not pushed. Once the claim is
/// abandoned, the next run fences the batch, settles the claim and sends it, within grace: one
/// push, no missed-call notice; another run changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_after_its_claim_in_a_batch_is_recovered_once() {
    let (app, push) = dispatch_app().await;
    let mut d = device(&app, "fault-crash").await;
    d.alert_token =
        Some(AlertToken::parse("alertToken", &format!("{:064x}", fastrand::u128(..))).unwrap());
    let (r, second, killed_at, claimed) =
        a_call_whose_run_was_killed_after_its_claim(&app, &push, &d).await;
    let batch = claimed.mark_batch.map(|b| b.timestamp_millis());
    assert_eq!(
        (batch, claimed.push_started_at),
        (Some(second.timestamp_millis() / 100 * 100), None),
        "the claim names its batch (its tenth of a second), unmarked"
    );

    let (_, late) = recovered_once(&app, &push, &r, second, killed_at).await;
    assert_eq!(status(&app, &r).await, ReservationStatus::Sent);
    assert!(
        push.alerts_for_call(r.call_id.as_str()).is_empty(),
        "no notice"
    );
    // Another run changes nothing.
    let after = handle(&app, schedule_event()).await.unwrap();
    assert_eq!(
        (&after["sent"], &after["failed"]),
        (&Value::from(0), &Value::from(0))
    );
    assert_eq!(push.sent().len(), 1);
    faults::record(
        "Dispatch: run killed after its claim (device without confirmsCalls: the claim names its batch, marked at the second)",
        "a run while the claim is fresh leaves it; the first run after the claim timeout fences the batch and sends it within grace; one push, no notice",
        &recovered_in(late),
    );
}

/// A device that confirms its calls: claim and mark are two writes, and a run killed between
/// them has not pushed. Once the claim is abandoned, the next run sends it, within grace: one
/// push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_between_claim_and_mark_is_recovered_once() {
    let (app, push) = dispatch_app().await;
    let mut d = device(&app, "fault-crash-confirming").await;
    d.confirms_calls = true;
    let (r, second, killed_at, claimed) =
        a_call_whose_run_was_killed_after_its_claim(&app, &push, &d).await;
    assert_eq!(claimed.push_started_at, None, "killed before its mark");

    let (pushed, late) = recovered_once(&app, &push, &r, second, killed_at).await;
    assert_eq!(pushed.payload["attempt"], 1);
    let stored = app.store().await.unwrap();
    let stored = stored.get_reservation(&r.device_id, Utc::now()).await;
    assert_eq!(stored.unwrap().unwrap().pushes, 1, "its push counted");
    faults::record(
        "Dispatch: run killed between claim and push mark (device with confirmsCalls)",
        "a run while the claim is fresh leaves it; the first run after the claim timeout sends it within grace; one push",
        &recovered_in(late),
    );
}

/// A run killed before its claim (after its device read) leaves the call `scheduled`: the next
/// run sends it, at once, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_before_its_claim_leaves_the_call_to_the_next_run() {
    let (app, push) = dispatch_app().await;
    let d = device(&app, "fault-crash-early").await;
    let second = Utc::now() + Duration::milliseconds(2500);
    let r = reserve(&app, &d, second).await;
    let run = {
        let app = app.clone();
        tokio::spawn(async move { handle(&app, schedule_event()).await })
    };
    // The device is read 2 s before the second, the claim made 0.5 s before.
    let kill_at = second - Duration::milliseconds(1000);
    tokio::time::sleep((kill_at - Utc::now()).to_std().unwrap_or_default()).await;
    run.abort();
    let _ = run.await;
    assert_eq!(status(&app, &r).await, ReservationStatus::Scheduled);
    let next = handle(&app, schedule_event()).await.unwrap();
    assert_eq!(next["sent"], 1, "{next}");
    let pushes = push.sent();
    assert_eq!(pushes.len(), 1, "{pushes:#?}");
    assert_eq!(status(&app, &r).await, ReservationStatus::Sent);
    let late = (pushes[0].at - second).num_milliseconds();
    // Within grace it is: past it a call is `missed`, never pushed.
    assert!(late >= 0, "never early: {late} ms");
}
