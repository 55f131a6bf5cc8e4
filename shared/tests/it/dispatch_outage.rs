//! An outage of the dispatcher longer than grace + look-back (7 minutes): the calls due in it
//! are swept by the next run (of the same process, or of a new one, from the store's sweep
//! mark): stored `missed` and counted in `Missed`; a DELETE of such a call, before or after
//! the sweep, is 409 `TOO_LATE` ("missed"), never 204; a swept call whose device registered an
//! `alertToken` gets its one missed-call notice when it is marked. Manual clock, both stores.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use koe::dispatch::{Dispatcher, RunCause, RunReport};
use koe::domain::device::{AlertToken, PushEnvironment};
use koe::domain::reservation::{Reservation, ReservationStatus};
use koe::platform::metrics::catalogue::DISPATCH;
use koe::platform::metrics::{MemorySink, Metrics};
use koe::store::Store;
use koe_testkit::emf;
use koe_testkit::harness::{TestApp, error_body, send, spawn_app_with};

use crate::dispatch_world::{World, at, t0};

/// One run of `dispatcher` at `now` (the clock set there at once: an outage has no runs), to
/// its end.
async fn run_at(w: &World, dispatcher: &Dispatcher, now: DateTime<Utc>) -> RunReport {
    w.clock.set(now);
    let d = dispatcher.clone();
    let run = tokio::spawn(async move { d.run(RunCause::Schedule).await });
    let [report] = w
        .finish(vec![run], now + Duration::seconds(3))
        .await
        .try_into()
        .unwrap();
    report
}

async fn delete(app: &TestApp, r: &Reservation) -> reqwest::Response {
    let path = format!("/calls?deviceId={}", r.device_id.as_str());
    send(app.agent(http::Method::DELETE, &path)).await
}

async fn too_late_missed(app: &TestApp, r: &Reservation) {
    let body = error_body(delete(app, r).await, 409, "TOO_LATE").await;
    assert!(
        body["message"].as_str().unwrap().contains("missed"),
        "{body}"
    );
}

/// A run of `dispatcher` at `now` sweeps `r` `missed` (the only call it sweeps): a DELETE of it
/// is then 409 TOO_LATE.
async fn swept_missed(
    w: &World,
    app: &TestApp,
    dispatcher: &Dispatcher,
    r: &Reservation,
    now: DateTime<Utc>,
) {
    let report = run_at(w, dispatcher, now).await;
    assert_eq!(report.missed, 1, "{report:?}");
    assert_eq!(w.stored(r).await.unwrap().status, ReservationStatus::Missed);
    too_late_missed(app, r).await;
}

pub(crate) async fn calls_due_in_an_outage_are_swept_missed_and_counted(store: Arc<dyn Store>) {
    let w = World::new(store.clone());
    let sink = MemorySink::default();
    let process = |w: &World| {
        w.dispatcher()
            .measured_by(Metrics::new(Arc::new(sink.clone()), "koe-dispatch"))
    };
    let (clock, push) = (w.clock.clone(), w.push.clone());
    let app = spawn_app_with(&[], |app| {
        app.with_clock(clock.clone())
            .with_store(store.clone())
            .with_push(push.clone())
    })
    .await;
    let mut first = w.device("outage-1", PushEnvironment::Production).await;
    first.alert_token = Some(AlertToken::parse("alertToken", &"a1".repeat(32)).unwrap());
    store.put_device(&first).await.unwrap();
    let second = w.device("outage-2", PushEnvironment::Production).await;
    let r1 = w.reserve(&first, at(3 * 60)).await;
    let r2 = w.reserve(&second, at(30 * 60)).await;

    // A process runs at T0, then nothing runs for 20 minutes.
    let warm = process(&w);
    run_at(&w, &warm, t0()).await;
    w.clock.set(at(20 * 60));
    too_late_missed(&app, &r1).await;
    assert_eq!(
        w.stored(&r1).await.unwrap().status,
        ReservationStatus::Scheduled,
        "not cancelled"
    );
    swept_missed(&w, &app, &warm, &r1, at(20 * 60)).await;
    // Marked within a day of its time: its notice, once.
    let alerts = w.push.alerts_for_call(r1.call_id.as_str());
    assert_eq!(alerts.len(), 1, "one notice: {alerts:#?}");
    assert_eq!(alerts[0].payload["reason"], "missed");
    assert_eq!(alerts[0].token, "a1".repeat(32));
    assert!(w.stored(&r1).await.unwrap().notice_sent_at.is_some());

    // Another outage, then a new process (a cold container): it sweeps from the store's mark.
    let cold = process(&w);
    swept_missed(&w, &app, &cold, &r2, at(45 * 60)).await;

    let lines = emf::parse_all(&sink.lines());
    assert_eq!(emf::total(&lines, DISPATCH, "Missed"), 2.0, "{lines:#?}");
    assert!(w.push.attempts().is_empty(), "a missed call never rings");
    assert_eq!(
        w.push.alerts_for_call(r1.call_id.as_str()).len(),
        1,
        "never a second notice"
    );
    assert!(
        w.push.alerts_for_call(r2.call_id.as_str()).is_empty(),
        "no alertToken, no notice"
    );
}

on_each_store!(calls_due_in_an_outage_are_swept_missed_and_counted);
