//! POST /calls with an `Idempotency-Key` (scoped to the device, checked after its secret):
//! replays of the first answer while its reservation exists, what a replay says once it is
//! gone, and a create whose answer never came (its replies lost inside the server) retried by
//! the app: the same reservation, counted once.

use std::sync::Arc;

use chrono::Duration;
use koe::domain::due::{COUNT_STEP, raises_count};
use koe::domain::reservation::CallId;
use koe::store::prelude::*;
use koe_testkit::clock::ManualClock;
use koe_testkit::dispatching::ProxiedWorld;
use koe_testkit::harness::{TestApp, error_body, invalid_field, send, spawn_app_with};
use serde_json::{Value, json};

use super::api_calls::{AT, NOW, app_at_now, delete, device_id, get_ok, post_raw, register, token};
use super::api_calls_refusals::{AT_2035, NOW_2035};

/// POST /calls with an `Idempotency-Key`.
pub(super) async fn post_with_key(app: &TestApp, key: &str, body: &Value) -> reqwest::Response {
    send(
        app.agent(http::Method::POST, "/calls")
            .header("Idempotency-Key", key)
            .body(body.to_string()),
    )
    .await
}

/// POST /calls with an `Idempotency-Key` and the device's secret.
async fn post_with_key_and_secret(
    app: &TestApp,
    key: &str,
    secret: &str,
    body: &Value,
) -> reqwest::Response {
    send(
        app.agent(http::Method::POST, "/calls")
            .header("Idempotency-Key", key)
            .header("x-device-secret", secret)
            .body(body.to_string()),
    )
    .await
}

/// An app at now with `device` registered, and the body of a reservation for it at `AT`.
async fn registered_app(device: &str) -> (TestApp, Value) {
    let (app, _) = app_at_now().await;
    register(&app, device).await;
    (app, json!({"deviceId": device, "scheduledAt": AT}))
}

/// The same key and body get the first 201 again (also after `scheduledAt` has come too
/// close, and after the reservation changed state); another body with that key is 409
/// IDEMPOTENCY_KEY_REUSED; after 24 hours the key is free again.
async fn idempotent_retries_get_the_first_answer(app: &TestApp, clock: &ManualClock) {
    let device = format!("idem:{:016x}", fastrand::u64(..));
    register(app, &device).await;
    let key = format!("{:032x}", fastrand::u128(..));
    let body = json!({"deviceId": device, "scheduledAt": AT, "callerName": "こえ"});

    let first = post_with_key(app, &key, &body).await;
    assert_eq!(first.status().as_u16(), 201);
    assert_eq!(first.headers().get("idempotent-replayed"), None);
    let first: Value = first.json().await.unwrap();

    // A retry (the app did not see the first answer): the same 201, the same reservation.
    clock.advance(Duration::seconds(25));
    let retry = post_with_key(app, &key, &body).await;
    assert_eq!(retry.status().as_u16(), 201);
    assert_eq!(
        retry
            .headers()
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    assert_eq!(retry.json::<Value>().await.unwrap(), first);
    assert_eq!(get_ok(app, &device).await["callId"], first["callId"]);

    // Without the key, a request is judged anew: the slot is taken.
    let other = json!({"deviceId": device, "scheduledAt": "2026-03-01T10:00:00+09:00"});
    error_body(post_raw(app, &other).await, 409, "RESERVATION_EXISTS").await;

    // The same key with another body.
    let response = post_with_key(app, &key, &other).await;
    let conflict = error_body(response, 409, "IDEMPOTENCY_KEY_REUSED").await;
    let message = conflict["message"].as_str().unwrap();
    assert!(message.starts_with("Idempotency-Key "), "{conflict}");

    // 24 hours on, the key is free: judged as a new request again.
    clock.advance(Duration::hours(24));
    let later = json!({"deviceId": device, "scheduledAt": "2026-03-02T09:30:00+09:00"});
    delete(app, &device).await;
    let response = post_with_key(app, &key, &later).await;
    assert_eq!(response.status().as_u16(), 201);
    let fresh: Value = response.json().await.unwrap();
    assert_ne!(fresh["callId"], first["callId"]);
    assert!(app.events.published().is_empty());
}

#[tokio::test]
async fn idempotent_retries_get_the_first_answer_on_the_memory_store() {
    let (app, clock) = app_at_now().await;
    idempotent_retries_get_the_first_answer(&app, &clock).await;
}

#[tokio::test]
async fn idempotent_retries_get_the_first_answer_on_dynamodb_local() {
    let store = Arc::new(koe_testkit::dynamodb::fresh_store().await);
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let app = spawn_app_with(&[], |app| app.with_clock(clock.clone()).with_store(store)).await;
    idempotent_retries_get_the_first_answer(&app, &clock).await;
}

#[tokio::test]
async fn a_bad_idempotency_key_is_400_naming_the_header() {
    let (app, _) = app_at_now().await;
    let body = json!({"deviceId": "dev-1", "scheduledAt": AT});
    for key in ["", "has space", &"k".repeat(256)] {
        invalid_field(post_with_key(&app, key, &body).await, "Idempotency-Key").await;
    }
}

#[tokio::test]
async fn only_a_201_is_kept_so_an_error_can_be_retried() {
    let (app, _) = app_at_now().await;
    let device = "idem-late-register";
    let body = json!({"deviceId": device, "scheduledAt": AT});
    let key = "7d0c8f1e-0000-4000-8000-000000000001";
    error_body(
        post_with_key(&app, key, &body).await,
        409,
        "DEVICE_NOT_REGISTERED",
    )
    .await;
    register(&app, device).await;
    assert_eq!(post_with_key(&app, key, &body).await.status().as_u16(), 201);
}

#[tokio::test]
async fn concurrent_copies_of_one_request_all_get_the_one_reservation() {
    let device = "idem-race";
    let (app, body) = registered_app(device).await;
    let key = "7d0c8f1e-0000-4000-8000-000000000002";
    let mut answers = Vec::new();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn(send(
                app.agent(http::Method::POST, "/calls")
                    .header("Idempotency-Key", key)
                    .body(body.to_string()),
            ))
        })
        .collect();
    for task in tasks {
        let response = task.await.unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        answers.push((status, body));
    }
    let call = get_ok(&app, device).await["callId"].clone();
    for (status, body) in &answers {
        // The copies make the same reservation (its id comes from the key): each is answered
        // with it, whichever wrote it.
        assert_eq!((*status, &body["callId"]), (201, &call), "{body}");
    }
}

/// The app's retry of a create whose answer it never saw is answered with the first
/// reservation, and a replay once that reservation is gone says so (what is true now).
#[tokio::test]
async fn a_replay_after_the_reservation_was_cancelled_is_409_reservation_gone() {
    let device = "idem-cancelled";
    let (app, body) = registered_app(device).await;
    let key = "7d0c8f1e-0000-4000-8000-000000000003";
    let first = post_with_key(&app, key, &body).await;
    assert_eq!(first.status().as_u16(), 201);
    assert_eq!(delete(&app, device).await.status().as_u16(), 204);
    let response = post_with_key(&app, key, &body).await;
    let gone = error_body(response, 409, "RESERVATION_GONE").await;
    let message = gone["message"].as_str().unwrap();
    assert!(message.contains("Idempotency-Key"), "{gone}");
    // Nothing was made again: the device has no reservation.
    assert_eq!(
        send(app.agent(http::Method::GET, &format!("/calls?deviceId={device}")))
            .await
            .status()
            .as_u16(),
        404
    );
    // A new key reserves again.
    let again = post_with_key(&app, "7d0c8f1e-0000-4000-8000-000000000004", &body).await;
    assert_eq!(again.status().as_u16(), 201);
}

/// A key belongs to its device: the same key from another device is that device's own request
/// (no 409, nothing told about the first), and a replay needs the device's secret as any
/// request for the device does.
#[tokio::test]
async fn an_idempotency_key_is_the_devices_own_and_its_replay_needs_the_devices_secret() {
    let (app, _) = app_at_now().await;
    let key = "7d0c8f1e-0000-4000-8000-000000000005";
    let (a, b) = ("idem-device-a", "idem-device-b");
    let secret = app.register_proven_device(a, &token()).await;
    register(&app, b).await;

    let body_a = json!({"deviceId": a, "scheduledAt": AT});
    let first = post_with_key_and_secret(&app, key, &secret, &body_a).await;
    assert_eq!(first.status().as_u16(), 201);
    let first: Value = first.json().await.unwrap();

    // Another device, the same key, its own body: its own reservation.
    let body_b = json!({"deviceId": b, "scheduledAt": AT});
    let other = post_with_key(&app, key, &body_b).await;
    assert_eq!(other.status().as_u16(), 201);
    let other: Value = other.json().await.unwrap();
    assert_ne!(other["callId"], first["callId"]);
    assert_eq!(other["deviceId"], b);

    // The replay without the device's secret: refused before anything is replayed.
    error_body(
        post_with_key(&app, key, &body_a).await,
        403,
        "DEVICE_SECRET_REQUIRED",
    )
    .await;
    let replayed = post_with_key_and_secret(&app, key, &secret, &body_a).await;
    assert_eq!(replayed.status().as_u16(), 201);
    assert_eq!(replayed.json::<Value>().await.unwrap(), first);
}

/// On DynamoDB Local behind a proxy (in 2035, so DynamoDB Local's TTL sweep cannot take the
/// records mid-test): the reservation's put is written but every reply is lost,
/// and so is the read that would have found it, so the app gets a 503. Its retry with the same
/// key makes the same reservation (201, the first one's id) and the minute is counted once;
/// without a key, a retry is told the slot is taken (409) and where to look.
#[tokio::test]
async fn a_create_answered_503_after_it_was_written_is_the_same_reservation_when_retried() {
    let world = ProxiedWorld::new().await;
    let clock = Arc::new(ManualClock::at_rfc3339(NOW_2035));
    let store = world.store.clone();
    let app = spawn_app_with(&[], |app| app.with_clock(clock.clone()).with_store(store)).await;
    let calls = world.tables.calls.clone();
    let lose_the_create = |device: &str, write: &str| {
        // The first attempt is carried out and its reply lost; the SDK's retries are lost
        // on the way.
        world.dropper.drop_replies(write, "scheduledAtMs", 1);
        world.dropper.refuse_requests(write, "scheduledAtMs", 2);
        let read_back = format!(r#""TableName":"{calls}","Key":{{"deviceId":{{"S":"{device}""#);
        world.dropper.refuse_requests("GetItem", &read_back, 3);
    };
    let minute = "2035-03-01T00:00Z";

    let device = "lost-create-keyed";
    register(&app, device).await;
    let body = json!({"deviceId": device, "scheduledAt": AT_2035});
    let key = "7d0c8f1e-0000-4000-8000-000000000006";
    lose_the_create(device, "PutItem");
    error_body(
        post_with_key(&app, key, &body).await,
        503,
        "SERVICE_UNAVAILABLE",
    )
    .await;
    world.dropper.clear();
    let written = world
        .store
        .get_reservation(&device_id(device), clock_now(&clock))
        .await
        .unwrap()
        .expect("the put was carried out");
    let retry = post_with_key(&app, key, &body).await;
    assert_eq!(retry.status().as_u16(), 201);
    let retry: Value = retry.json().await.unwrap();
    assert_eq!(
        retry["callId"],
        written.call_id.as_str(),
        "the same reservation"
    );
    assert_eq!(get_ok(&app, device).await["callId"], retry["callId"]);
    // Counted once: `COUNT_STEP` if its call id is one that counts, else nothing.
    let step = |call_id: &CallId| {
        if raises_count(call_id) { COUNT_STEP } else { 0 }
    };
    let keyed = step(&written.call_id);
    assert_eq!(
        world.store.due_count(minute).await.unwrap(),
        keyed,
        "counted once"
    );

    // Without a key the retry is a new request: the slot is taken by the first.
    let device = "lost-create-unkeyed";
    register(&app, device).await;
    let body = json!({"deviceId": device, "scheduledAt": AT_2035});
    lose_the_create(device, "PutItem");
    error_body(post_raw(&app, &body).await, 503, "SERVICE_UNAVAILABLE").await;
    let taken = error_body(post_raw(&app, &body).await, 409, "RESERVATION_EXISTS").await;
    assert!(
        taken["message"].as_str().unwrap().contains("GET /calls"),
        "{taken}"
    );
    let first = get_ok(&app, device).await;
    assert_eq!(first["status"], "scheduled");
    // Its put's fate unknown, the 503 counted it as made (32 if its call id is one that
    // counts: a reservation the count does not cover could crowd its shards); the refused
    // retry counted nothing.
    let call_id = CallId::from_stored(first["callId"].as_str().unwrap().to_owned());
    assert_eq!(
        world.store.due_count(minute).await.unwrap(),
        keyed + step(&call_id)
    );
    koe_testkit::faults::record(
        "DynamoDB: POST /calls' put is written, every reply and the read-back lost (503)",
        "with its Idempotency-Key the app's retry makes the same reservation: 201, counted once",
        "keyed retry: 201 with the first callId, counted once; unkeyed retry: 409 naming GET /calls",
    );
}

fn clock_now(clock: &ManualClock) -> chrono::DateTime<chrono::Utc> {
    koe::platform::clock::Clock::now(clock)
}
