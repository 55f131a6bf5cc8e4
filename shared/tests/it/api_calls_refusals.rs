//! `/calls` when something is refused, cancelled or past: a cancelled keyed reservation never
//! comes back (its kept answer lost or expired), DELETE names the call it cancels, a reservation
//! past grace reads `missed`, a secret presented on `/calls` proves the device, and refused
//! creates leave the minute's count alone (on DynamoDB Local, through the app).

use std::sync::{Arc, Mutex};

use chrono::{Duration, SecondsFormat, Utc};
use koe::store::Store;
use koe::store::memory::MemoryStore;
use koe_testkit::clock::ManualClock;
use koe_testkit::dispatching::{ProxiedWorld, run_once, short_run};
use koe_testkit::harness::{TestApp, error_body, invalid_field, send, spawn_app_with};
use serde_json::{Value, json};

use super::api_calls::{AT, app_at_now, delete, get_ok, post_raw, register, token};
use super::api_idempotency::post_with_key;

/// The DynamoDB Local tests' time: in 2035, so that no TTL they write has passed by the wall
/// clock (DynamoDB Local deletes expired items, at moments of its own).
pub(super) const NOW_2035: &str = "2035-03-01T00:00:00Z";
/// 30 s after [`NOW_2035`], in JST.
pub(super) const AT_2035: &str = "2035-03-01T09:00:30+09:00";

async fn delete_call(app: &TestApp, device: &str, call_id: &str) -> reqwest::Response {
    send(app.agent(
        http::Method::DELETE,
        &format!("/calls?deviceId={device}&callId={call_id}"),
    ))
    .await
}

/// A keyed create, cancelled, then retried with the same key and body after its kept answer
/// is gone (its 24-hour window passed): 409 RESERVATION_GONE, and no reservation comes back.
async fn a_cancelled_keyed_reservation_stays_cancelled_after_its_window(
    app: &TestApp,
    clock: &ManualClock,
    scheduled_at: &str,
) {
    let device = format!("gone-{:016x}", fastrand::u64(..));
    register(app, &device).await;
    let key = format!("{:032x}", fastrand::u128(..));
    let body = json!({"deviceId": device, "scheduledAt": scheduled_at});
    assert_eq!(post_with_key(app, &key, &body).await.status().as_u16(), 201);
    assert_eq!(delete(app, &device).await.status().as_u16(), 204);
    clock.advance(Duration::hours(25));
    error_body(
        post_with_key(app, &key, &body).await,
        409,
        "RESERVATION_GONE",
    )
    .await;
    error_body(
        send(app.agent(http::Method::GET, &format!("/calls?deviceId={device}"))).await,
        404,
        "NOT_FOUND",
    )
    .await;
}

#[tokio::test]
async fn a_cancelled_keyed_reservation_stays_cancelled_on_the_memory_store() {
    let (app, clock) = app_at_now().await;
    a_cancelled_keyed_reservation_stays_cancelled_after_its_window(
        &app,
        &clock,
        "2026-03-03T07:00:00+09:00",
    )
    .await;
}

#[tokio::test]
async fn a_cancelled_keyed_reservation_stays_cancelled_on_dynamodb_local() {
    let store = Arc::new(koe_testkit::dynamodb::fresh_store().await);
    let clock = Arc::new(ManualClock::at_rfc3339(NOW_2035));
    let app = spawn_app_with(&[], |app| app.with_clock(clock.clone()).with_store(store)).await;
    a_cancelled_keyed_reservation_stays_cancelled_after_its_window(
        &app,
        &clock,
        "2035-03-03T07:00:00+09:00",
    )
    .await;
}

/// On DynamoDB Local behind a proxy that refuses the kept answer's write: the keyed create is
/// 201 (its answer not kept), the app cancels it, the app's retry of the create (same key and
/// body) is 409 RESERVATION_GONE, and a dispatch run over the call's second pushes nothing.
#[tokio::test]
async fn a_cancelled_create_retried_after_its_answer_was_not_kept_never_rings() {
    let world = ProxiedWorld::new().await;
    let store = world.store.clone();
    let app = spawn_app_with(&[], |app| app.with_store(store)).await;
    let device = format!("gone-ddb-{:016x}", fastrand::u64(..));
    register(&app, &device).await;
    let at = (Utc::now() + Duration::seconds(11)).to_rfc3339_opts(SecondsFormat::Secs, true);
    let body = json!({"deviceId": device, "scheduledAt": at});
    let key = format!("{:032x}", fastrand::u128(..));
    world.dropper.refuse_requests("PutItem", "answerBody", 10);
    assert_eq!(
        post_with_key(&app, &key, &body).await.status().as_u16(),
        201
    );
    assert_eq!(delete(&app, &device).await.status().as_u16(), 204);
    error_body(
        post_with_key(&app, &key, &body).await,
        409,
        "RESERVATION_GONE",
    )
    .await;
    world.dropper.clear();
    let mut settings = short_run();
    settings.window = std::time::Duration::from_secs(14);
    let report = run_once(world.store.clone(), world.push.clone(), settings).await;
    assert_eq!(
        world.push.sent().len(),
        0,
        "no push for a cancelled call: {report:?}"
    );
    koe_testkit::faults::record(
        "DynamoDB: a keyed POST /calls whose kept answer's write fails, then DELETE, then the same POST",
        "the cancelled reservation never comes back: its tombstone answers the retry",
        "retry: 409 RESERVATION_GONE; a dispatch run over its second: no push",
    );
}

#[tokio::test]
async fn delete_with_a_call_id_cancels_only_that_reservation() {
    let (app, _) = app_at_now().await;
    let device = "delete-by-call";
    register(&app, device).await;
    let made: Value = post_raw(&app, &json!({"deviceId": device, "scheduledAt": AT}))
        .await
        .json()
        .await
        .unwrap();
    let call_id = made["callId"].as_str().unwrap();
    invalid_field(delete_call(&app, device, "not-a-call").await, "callId").await;
    error_body(
        delete_call(&app, device, &format!("{:032x}", 7u128)).await,
        404,
        "NOT_FOUND",
    )
    .await;
    assert_eq!(get_ok(&app, device).await["status"], "scheduled");
    assert_eq!(
        delete_call(&app, device, call_id).await.status().as_u16(),
        204
    );
    // Made again (its answer lost): the same answer; and it never touches a newer reservation.
    assert_eq!(
        delete_call(&app, device, call_id).await.status().as_u16(),
        204
    );
    let newer: Value = post_raw(&app, &json!({"deviceId": device, "scheduledAt": AT}))
        .await
        .json()
        .await
        .unwrap();
    // Made again after the newer one replaced it: 204 again (its tombstone), nothing cancelled.
    assert_eq!(
        delete_call(&app, device, call_id).await.status().as_u16(),
        204
    );
    let kept = get_ok(&app, device).await;
    assert_eq!(
        (&kept["callId"], &kept["status"]),
        (&newer["callId"], &json!("scheduled"))
    );
}

#[tokio::test]
async fn a_scheduled_reservation_past_grace_reads_missed() {
    let (app, clock) = app_at_now().await;
    let device = "past-grace";
    register(&app, device).await;
    post_raw(&app, &json!({"deviceId": device, "scheduledAt": AT})).await;
    // AT is 30 s after NOW; the grace period is 120 s.
    clock.advance(Duration::seconds(30 + 120));
    assert_eq!(get_ok(&app, device).await["status"], "scheduled");
    clock.advance(Duration::seconds(1));
    assert_eq!(get_ok(&app, device).await["status"], "missed");
}

/// In front of the app's store: the name of each request it is asked for, in order.
struct Requests {
    inner: Arc<dyn Store>,
    seen: Mutex<Vec<&'static str>>,
}

koe_testkit::store_layer!(Requests, |this, op, call| {
    this.seen.lock().unwrap().push(op.name());
    call().await
});

impl Requests {
    fn take(&self) -> Vec<&'static str> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

/// A DELETE reads the reservation once, in the cancel: before grace it cancels (204), past it
/// the same read answers 409 `TOO_LATE` (`missed`) and nothing is written.
#[tokio::test]
async fn a_delete_reads_the_reservation_once_and_is_too_late_past_grace() {
    let clock = Arc::new(ManualClock::at_rfc3339(super::api_calls::NOW));
    let requests = Arc::new(Requests {
        inner: Arc::new(MemoryStore::new()),
        seen: Mutex::new(Vec::new()),
    });
    let store: Arc<dyn Store> = requests.clone();
    let app = spawn_app_with(&[], |app| app.with_clock(clock.clone()).with_store(store)).await;
    for (device, late) in [("cancel-in-time", 0), ("cancel-past-grace", 30 + 120 + 1)] {
        register(&app, device).await;
        post_raw(&app, &json!({"deviceId": device, "scheduledAt": AT})).await;
        clock.advance(Duration::seconds(late));
        requests.take();
        let answer = delete(&app, device).await;
        let reservation_requests: Vec<_> = requests
            .take()
            .into_iter()
            .filter(|name| name.contains("Reservation"))
            .collect();
        assert_eq!(reservation_requests, ["CancelReservation"], "{device}");
        if late == 0 {
            assert_eq!(answer.status().as_u16(), 204);
        } else {
            let body = error_body(answer, 409, "TOO_LATE").await;
            assert!(
                body["message"].as_str().unwrap().contains("missed"),
                "{body}"
            );
            assert_eq!(get_ok(&app, device).await["status"], "missed");
        }
    }
}

/// A device whose app presents its issued secret on `/calls` has proven it, as after a
/// `PUT /devices` that presented it: from then on a request without it is refused.
#[tokio::test]
async fn a_secret_presented_on_calls_proves_the_device() {
    let (app, _) = app_at_now().await;
    let device = "proven-on-calls";
    let issued: Value = send(
        app.agent(http::Method::PUT, "/devices")
            .body(json!({"deviceId": device, "voipToken": token()}).to_string()),
    )
    .await
    .json()
    .await
    .unwrap();
    let secret = issued["deviceSecret"].as_str().unwrap().to_owned();
    let get = |secret: Option<&str>| {
        let mut request = app.agent(http::Method::GET, &format!("/calls?deviceId={device}"));
        if let Some(secret) = secret {
            request = request.header("x-device-secret", secret);
        }
        send(request)
    };
    // Not proven yet: a request without the secret is still admitted.
    error_body(get(None).await, 404, "NOT_FOUND").await;
    error_body(get(Some(&secret)).await, 404, "NOT_FOUND").await;
    error_body(get(None).await, 403, "DEVICE_SECRET_REQUIRED").await;
    let put = send(
        app.agent(http::Method::PUT, "/devices")
            .body(json!({"deviceId": device, "voipToken": token()}).to_string()),
    )
    .await;
    error_body(put, 403, "DEVICE_SECRET_REQUIRED").await;
}

/// Through the app on DynamoDB Local: 300 creates refused because the device's slot is taken
/// (about 9 of them with call ids that would raise the count by 32) leave the minute's stored
/// count as its one reservation made it: 32 if its call id is one that counts, else 0.
#[tokio::test]
async fn refused_creates_through_the_app_leave_the_minutes_count() {
    let store = Arc::new(koe_testkit::dynamodb::fresh_store().await);
    let clock = Arc::new(ManualClock::at_rfc3339(NOW_2035));
    let counts = store.clone();
    let app = spawn_app_with(&[], |app| app.with_clock(clock.clone()).with_store(store)).await;
    let device = "refused-300";
    register(&app, device).await;
    let body = json!({"deviceId": device, "scheduledAt": AT_2035});
    let made = post_raw(&app, &body).await;
    assert_eq!(made.status().as_u16(), 201);
    let made: Value = made.json().await.unwrap();
    let call_id =
        koe::domain::reservation::CallId::from_stored(made["callId"].as_str().unwrap().to_owned());
    let counted = if koe::domain::due::raises_count(&call_id) {
        koe::domain::due::COUNT_STEP
    } else {
        0
    };
    for _ in 0..300 {
        error_body(post_raw(&app, &body).await, 409, "RESERVATION_EXISTS").await;
    }
    let minute = "2035-03-01T00:00Z";
    assert_eq!(
        koe::store::DispatchStore::due_count(counts.as_ref(), minute)
            .await
            .unwrap(),
        counted
    );
}

/// What docs/security.md ("An expired device record") tells the app: past its record's TTL a
/// device is registered anew by its next `PUT /devices`, which answers a new secret even when
/// the old one is presented; the app keeps the new one, and the old one is refused from then
/// on.
#[tokio::test]
async fn a_device_past_its_ttl_is_registered_anew_with_a_new_secret() {
    let (app, clock) = app_at_now().await;
    let device = "expired-device";
    let put = |secret: Option<String>| {
        let mut request = app
            .agent(http::Method::PUT, "/devices")
            .body(json!({"deviceId": device, "voipToken": token()}).to_string());
        if let Some(secret) = secret {
            request = request.header("x-device-secret", secret);
        }
        send(request)
    };
    let first: Value = put(None).await.json().await.unwrap();
    let old = first["deviceSecret"].as_str().unwrap().to_owned();
    assert_eq!(put(Some(old.clone())).await.status().as_u16(), 200);
    error_body(put(None).await, 403, "DEVICE_SECRET_REQUIRED").await;

    clock.advance(koe::domain::device::DEVICE_RETENTION);
    let renewed = put(Some(old.clone())).await;
    assert_eq!(renewed.status().as_u16(), 200);
    let renewed: Value = renewed.json().await.unwrap();
    let new = renewed["deviceSecret"]
        .as_str()
        .expect("a new registration answers a new secret")
        .to_owned();
    assert_ne!(new, old);
    assert_eq!(put(Some(new)).await.status().as_u16(), 200);
    error_body(put(Some(old)).await, 403, "DEVICE_SECRET_REQUIRED").await;
}
