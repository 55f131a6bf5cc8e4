//! The missed-call notice (docs/dispatch.md, "Missed-call notice"): runs on the real clock with a
//! recording push sender. A dead VoIP token (`failed`), the last push unconfirmed and a call
//! found past grace (`missed`) each give exactly one alert push to the device's `alertToken`;
//! `sent`, `rang` and a device without an `alertToken` give none; a dead alert token is removed;
//! a notice APNs surely did not take is sent, alone, by the next run.
//! Both stores, also with the notice's writes answered late or their replies lost (a layer in
//! front of the store, and DynamoDB Local's real replies dropped).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration as StdDuration;

use chrono::{Duration, Utc};
use koe::dispatch::{Dispatcher, RunCause, RunReport};
use koe::domain::device::{AlertToken, Device, PushEnvironment};
use koe::domain::reservation::{Reservation, ReservationStatus, ScheduledAt};
use koe::platform::clock::{Clock, SystemClock};
use koe::platform::config::{Config, DispatchConfig, Vars};
use koe::store::prelude::*;
use koe::store::{ConfirmAnswer, Op, StoreError};
use koe_testkit::devices;
use koe_testkit::push::{RecordingPushSender, Scripted};

fn settings(window: StdDuration) -> DispatchConfig {
    let mut s = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    s.window = window;
    s.reselect_every = StdDuration::from_millis(300);
    s.confirm_wait = StdDuration::from_millis(300);
    s.max_pushes = 3;
    s
}

struct World {
    store: Arc<dyn Store>,
    push: Arc<RecordingPushSender>,
}

impl World {
    fn new(store: Arc<dyn Store>) -> World {
        World {
            store,
            push: Arc::new(RecordingPushSender::new(Arc::new(SystemClock))),
        }
    }

    /// A device (with an alert token or not) and its call, due `in_ms` from now (negative: in
    /// the past).
    async fn call(&self, alert: bool, confirms: bool, in_ms: i64) -> (Device, Reservation) {
        let now = Utc::now();
        let device = Device {
            confirms_calls: confirms,
            alert_token: alert
                .then(|| AlertToken::parse("alertToken", &devices::random_token()).unwrap()),
            ..devices::device(&devices::random_id("n-"), PushEnvironment::Sandbox, now)
        };
        self.store.put_device(&device).await.unwrap();
        let at = (now + Duration::milliseconds(in_ms)).fixed_offset();
        let made = now.min(now + Duration::milliseconds(in_ms)) - Duration::seconds(1);
        let r = Reservation::new(
            device.device_id.clone(),
            ScheduledAt::from_stored(at),
            Some("Mika".into()),
            made,
        );
        self.store
            .create_reservation(&r, made, made - Duration::minutes(10))
            .await
            .unwrap();
        (device, r)
    }

    async fn run(&self, window: StdDuration) -> RunReport {
        self.run_on(self.store.clone(), window).await
    }

    async fn run_on(&self, store: Arc<dyn Store>, window: StdDuration) -> RunReport {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        Dispatcher::new(store, self.push.clone(), clock, settings(window), "t")
            .run(RunCause::Local)
            .await
    }

    async fn stored(&self, r: &Reservation) -> Reservation {
        koe_testkit::dispatching::stored(&*self.store, r).await
    }

    /// Exactly one notice of `r` left, to `device`'s alert token, saying `reason`; its time is
    /// stored.
    async fn one_notice(&self, device: &Device, r: &Reservation, reason: &str) {
        let alerts = self.push.alerts_for_call(r.call_id.as_str());
        assert_eq!(alerts.len(), 1, "one notice: {alerts:#?}");
        let alert = &alerts[0];
        assert_eq!(alert.token, device.alert_token.as_ref().unwrap().expose());
        assert_eq!(alert.environment, PushEnvironment::Sandbox);
        assert_eq!(alert.payload["reason"], reason);
        assert_eq!(alert.payload["callId"], r.call_id.as_str());
        assert_eq!(
            alert.payload["aps"],
            serde_json::json!({"alert": {"loc-key": "KOE_MISSED_CALL", "loc-args": ["Mika"]}, "sound": "default"})
        );
        assert_eq!(
            alert.expires_at,
            r.scheduled_at.utc() + koe::push::NOTICE_LIFETIME
        );
        let stored = self.stored(r).await;
        assert!(
            stored
                .notice_sent_at
                .is_some_and(|t| t > alert.at - Duration::milliseconds(1)),
            "noticeSentAt stored: {stored:?}"
        );
    }

    /// APNs answers `device`'s call pushes with `answer` (a dead VoIP token's).
    fn answers(&self, device: &Device, answer: Scripted) {
        self.push.script(device.device_id.as_str(), [answer]);
    }

    fn no_notice(&self, r: &Reservation) {
        let alerts = self.push.alerts_for_call(r.call_id.as_str());
        assert!(alerts.is_empty(), "no notice: {alerts:#?}");
    }
}

async fn a_dead_voip_token_gives_failed_and_one_notice(store: Arc<dyn Store>) {
    let w = World::new(store);
    let (device, r) = w.call(true, false, 1200).await;
    let (bare, plain) = w.call(false, false, 1200).await;
    w.answers(&device, Scripted::unregistered());
    w.answers(&bare, Scripted::unregistered());
    let report = w.run(StdDuration::from_millis(2500)).await;
    assert_eq!(w.stored(&r).await.status, ReservationStatus::Failed);
    w.one_notice(&device, &r, "failed").await;
    assert_eq!(w.stored(&plain).await.status, ReservationStatus::Failed);
    w.no_notice(&plain);
    assert_eq!((report.notices_sent, report.notices_failed), (1, 0));
    // A later run sends nothing more.
    w.run(StdDuration::from_millis(500)).await;
    w.one_notice(&device, &r, "failed").await;
}

async fn unconfirmed_after_the_last_push_gives_one_notice(store: Arc<dyn Store>) {
    let w = World::new(store);
    let (device, r) = w.call(true, true, 1000).await;
    let report = w.run(StdDuration::from_millis(3000)).await;
    let stored = w.stored(&r).await;
    assert_eq!(
        (stored.status, stored.pushes),
        (ReservationStatus::Unconfirmed, 3)
    );
    let last_push = w.push.sent_for_call(r.call_id.as_str())[2].at;
    w.one_notice(&device, &r, "unconfirmed").await;
    let alert = &w.push.alerts_for_call(r.call_id.as_str())[0];
    assert!(alert.at > last_push, "after the last push");
    assert!(
        alert.at - last_push < Duration::seconds(2),
        "within seconds of the outcome"
    );
    assert_eq!(report.notices_sent, 1, "{report:?}");
}

async fn a_call_missed_gives_one_notice(store: Arc<dyn Store>) {
    let w = World::new(store);
    let (device, r) = w.call(true, false, -180_000).await;
    w.run(StdDuration::from_millis(500)).await;
    assert_eq!(w.stored(&r).await.status, ReservationStatus::Missed);
    w.one_notice(&device, &r, "missed").await;
    assert!(w.push.sent_for_call(r.call_id.as_str()).is_empty());
}

async fn sent_and_rang_give_none(store: Arc<dyn Store>) {
    let w = World::new(store.clone());
    let (_, sent) = w.call(true, false, 1000).await;
    let (rang_device, rang) = w.call(true, true, 1000).await;
    let (push, call) = (w.push.clone(), rang.call_id.clone());
    let phone = tokio::spawn(async move {
        while push.sent_for_call(call.as_str()).is_empty() {
            tokio::time::sleep(StdDuration::from_millis(10)).await;
        }
        while let Ok(ConfirmAnswer::PushInFlight) | Err(_) = store
            .confirm_call(&rang_device.device_id, &call, Utc::now())
            .await
        {
            tokio::time::sleep(StdDuration::from_millis(20)).await;
        }
    });
    let report = w.run(StdDuration::from_millis(2500)).await;
    phone.await.unwrap();
    assert_eq!(w.stored(&sent).await.status, ReservationStatus::Sent);
    assert_eq!(w.stored(&rang).await.status, ReservationStatus::Rang);
    w.no_notice(&sent);
    w.no_notice(&rang);
    assert!(w.push.alert_attempts().is_empty());
    assert_eq!(report.notices_sent, 0);
}

async fn a_dead_alert_token_is_removed(store: Arc<dyn Store>) {
    let w = World::new(store);
    let (device, r) = w.call(true, true, 800).await;
    w.push
        .script_alerts(device.device_id.as_str(), [Scripted::unregistered()]);
    let report = w.run(StdDuration::from_millis(2800)).await;
    assert_eq!(w.stored(&r).await.status, ReservationStatus::Unconfirmed);
    assert_eq!(w.push.alert_attempts().len(), 1);
    assert!(w.stored(&r).await.notice_sent_at.is_none());
    assert_eq!(report.notices_failed, 1, "{report:?}");
    let now = Utc::now();
    let kept = w.store.get_device(&device.device_id, now).await.unwrap();
    let kept = kept.expect("the device stays registered");
    assert_eq!(kept.alert_token, None, "its dead alert token is removed");
    assert_eq!(kept.voip_token, device.voip_token);
}

/// A notice APNs surely did not take (5xx on every attempt) is released by its run and sent,
/// alone, by the next run: the call back in the index, its claim refused on the released
/// notice (the record the store returns), no call push (`dispatch_notice_retry` has the
/// minutes of an outage).
async fn a_notice_apns_did_not_take_is_sent_by_the_next_run(store: Arc<dyn Store>) {
    let w = World::new(store);
    let (device, r) = w.call(true, false, 1000).await;
    let down = Scripted::Fail(koe::push::PushError::Retryable {
        status: Some(503),
        reason: "ServiceUnavailable".into(),
    });
    w.push
        .script(device.device_id.as_str(), vec![down.clone(); 10]);
    w.push
        .script_alerts(device.device_id.as_str(), vec![down; 3]);
    let first = w.run(StdDuration::from_millis(2500)).await;
    assert_eq!(w.stored(&r).await.status, ReservationStatus::Failed);
    assert_eq!(
        (first.notices_sent, first.notices_failed),
        (0, 1),
        "{first:?}"
    );
    assert!(w.stored(&r).await.notice_retry, "released");
    let call_pushes = w.push.attempts().len();
    let next = w.run(StdDuration::from_millis(2000)).await;
    assert_eq!(next.notices_sent, 1, "{next:?}");
    w.one_notice(&device, &r, "failed").await;
    assert_eq!(w.push.attempts().len(), call_pushes, "no call push");
    let minute = r.scheduled_at.due_minute();
    let indexed = w.store.due_calls(&minute, 0).await.unwrap();
    assert!(
        indexed.iter().all(|c| c.call_id != r.call_id),
        "{indexed:?}"
    );
}

/// Two runs of two processes (no shared `InFlight`) over the same calls at once.
async fn two_overlapping_runs_give_one(store: Arc<dyn Store>) {
    let w = World::new(store);
    let (dead, failed) = w.call(true, false, 1000).await;
    let (never, unconfirmed) = w.call(true, true, 1000).await;
    w.answers(&dead, Scripted::bad_device_token());
    let window = StdDuration::from_millis(3000);
    let (a, b) = tokio::join!(w.run(window), w.run(window));
    w.one_notice(&dead, &failed, "failed").await;
    w.one_notice(&never, &unconfirmed, "unconfirmed").await;
    assert_eq!(a.notices_sent + b.notices_sent, 2, "{a:?} {b:?}");
}

/// In front of a store: the first reply of each notice write (`claim_notice`, `notice_sent`) is
/// lost after the write was made, and the second held back `hold` before it is answered.
struct LossyNotices {
    inner: Arc<dyn Store>,
    claims: AtomicU32,
    sents: AtomicU32,
    hold: StdDuration,
}

koe_testkit::store_layer!(LossyNotices, |this, op, call| {
    let seen = match op {
        Op::ClaimNotice(..) => &this.claims,
        Op::NoticeSent(..) => &this.sents,
        _ => return call().await,
    };
    let answer = call().await;
    match seen.fetch_add(1, Ordering::SeqCst) {
        0 => Err(E::from(StoreError::new("reply lost (test)"))),
        1 => {
            tokio::time::sleep(this.hold).await;
            answer
        }
        _ => answer,
    }
});

async fn lost_and_slow_notice_replies_still_give_one(store: Arc<dyn Store>) {
    let w = World::new(store.clone());
    let (device, r) = w.call(true, false, 1000).await;
    w.answers(&device, Scripted::bad_device_token());
    let lossy = Arc::new(LossyNotices {
        inner: store,
        claims: AtomicU32::new(0),
        sents: AtomicU32::new(0),
        hold: StdDuration::from_millis(600),
    });
    w.run_on(lossy.clone(), StdDuration::from_millis(2500))
        .await;
    assert!(
        lossy.claims.load(Ordering::SeqCst) >= 2,
        "the claim was made again"
    );
    assert!(
        lossy.sents.load(Ordering::SeqCst) >= 2,
        "noticeSentAt was written again"
    );
    w.one_notice(&device, &r, "failed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_replies_lost_on_the_notice_still_give_one() {
    let world = koe_testkit::dispatching::ProxiedWorld::new().await;
    let mut w = World::new(world.store.clone());
    w.push = world.push.clone();
    let (device, r) = w.call(true, true, 1000).await;
    world
        .dropper
        .drop_replies("UpdateItem", "SET #noticeClaim", 1);
    world
        .dropper
        .drop_replies("UpdateItem", "noticeSentAtMs", 1);
    w.run(StdDuration::from_millis(3000)).await;
    assert!(world.dropper.dropped() >= 2, "the faults happened");
    w.one_notice(&device, &r, "unconfirmed").await;
}

on_each_store!(;
    multi_thread: a_dead_voip_token_gives_failed_and_one_notice,
    unconfirmed_after_the_last_push_gives_one_notice,
    a_call_missed_gives_one_notice,
    sent_and_rang_give_none,
    a_dead_alert_token_is_removed,
    lost_and_slow_notice_replies_still_give_one,
    two_overlapping_runs_give_one,
    a_notice_apns_did_not_take_is_sent_by_the_next_run,
);
