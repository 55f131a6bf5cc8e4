//! POST /calls: a reservation made, refused while one is to come, its fields checked.

use std::collections::BTreeSet;

use chrono::Duration;
use koe::domain::reservation::ReservationStatus;
use koe_testkit::harness::{error_body, invalid_field, send};
use serde_json::{Value, json};

use super::{
    AT, ENDED, NOW, NOW_MILLIS, app_at_now, app_with_a_call, claim, create, ended_call, get,
    get_ok, now, post_raw, register, stored,
};

fn keys(body: &Value) -> BTreeSet<&str> {
    body.as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

#[tokio::test]
async fn post_creates_a_scheduled_reservation_keeping_the_clients_offset() {
    let (app, _clock) = app_at_now().await;
    register(&app, "dev-1").await;
    let response = post_raw(
        &app,
        &json!({"deviceId": "dev-1", "scheduledAt": AT, "callerName": "ミク"}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 201);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        keys(&body),
        BTreeSet::from([
            "callId",
            "deviceId",
            "scheduledAt",
            "status",
            "createdAt",
            "updatedAt",
            "callerName",
            "pushes"
        ]),
        "{body}"
    );
    assert_eq!(body["pushes"], 0, "{body}");
    assert!(
        body["callId"].as_str().is_some_and(|id| !id.is_empty()),
        "{body}"
    );
    assert_eq!(body["deviceId"], "dev-1");
    assert_eq!(body["scheduledAt"], AT);
    assert_eq!(body["status"], "scheduled");
    assert_eq!(body["createdAt"], NOW_MILLIS);
    assert_eq!(body["updatedAt"], NOW_MILLIS);
    assert_eq!(body["callerName"], "ミク");

    let stored = stored(&app, "dev-1").await.expect("stored");
    assert_eq!(stored.call_id.as_str(), body["callId"]);
    assert_eq!(stored.status, ReservationStatus::Scheduled);
    assert_eq!(stored.scheduled_at.utc(), now() + Duration::seconds(30));
    assert!(app.events.published().is_empty());
}

#[tokio::test]
async fn post_keeps_other_offsets_and_fractions_and_omits_an_absent_caller_name() {
    let (app, _clock) = app_at_now().await;
    for (device, at) in [
        ("dev-utc", "2026-03-01T00:05:00Z"),
        ("dev-ny", "2026-02-28T19:05:00-05:00"),
        ("dev-frac", "2026-03-01T09:05:00.250+09:00"),
    ] {
        register(&app, device).await;
        let body = create(&app, device, at).await;
        assert_eq!(body["scheduledAt"], at, "{device}");
        assert!(body.get("callerName").is_none(), "{body}");
    }
}

#[tokio::test]
async fn post_without_a_registered_device_is_409_device_not_registered() {
    let (app, _clock) = app_at_now().await;
    let response = post_raw(&app, &json!({"deviceId": "dev-unknown", "scheduledAt": AT})).await;
    error_body(response, 409, "DEVICE_NOT_REGISTERED").await;
    assert!(stored(&app, "dev-unknown").await.is_none());
    assert!(app.events.published().is_empty(), "a 409 is not notified");
}

#[tokio::test]
async fn a_second_post_while_scheduled_is_409_reservation_exists_and_keeps_the_first() {
    let (app, _clock, first) = app_with_a_call("dev-1").await;
    let response = post_raw(
        &app,
        &json!({"deviceId": "dev-1", "scheduledAt": "2026-03-01T10:00:00+09:00"}),
    )
    .await;
    error_body(response, 409, "RESERVATION_EXISTS").await;
    let current = get_ok(&app, "dev-1").await;
    assert_eq!(current, first, "the first reservation is untouched");
}

#[tokio::test]
async fn a_post_while_claimed_is_409_reservation_exists() {
    let (app, _clock, first) = app_with_a_call("dev-1").await;
    claim(&app, "dev-1", &first).await;
    let response = post_raw(
        &app,
        &json!({"deviceId": "dev-1", "scheduledAt": "2026-03-01T10:00:00+09:00"}),
    )
    .await;
    error_body(response, 409, "RESERVATION_EXISTS").await;
    assert_eq!(get_ok(&app, "dev-1").await["status"], "claimed");
}

#[tokio::test]
async fn after_sent_failed_or_missed_a_new_post_creates_a_new_reservation() {
    let (app, _clock) = app_at_now().await;
    for (device, outcome, status) in ENDED {
        let first = ended_call(&app, device, outcome).await;
        assert_eq!(get_ok(&app, device).await["status"], status);

        let second = create(&app, device, "2026-03-01T10:00:00+09:00").await;
        assert_ne!(second["callId"], first["callId"], "{device}: a new callId");
        assert_eq!(second["status"], "scheduled");
        let current = get_ok(&app, device).await;
        assert_eq!(
            current, second,
            "{device}: the new one replaced the old one"
        );
    }
}

#[tokio::test]
async fn a_scheduled_reservation_long_past_its_time_no_longer_blocks_a_new_post() {
    let (app, clock, first) = app_with_a_call("dev-1").await;
    // Past its time + grace (120 s) + claim timeout (30 s): it can never be sent now.
    clock.advance(Duration::seconds(30 + 151));
    let second = create(&app, "dev-1", "2026-03-01T10:00:00+09:00").await;
    assert_ne!(second["callId"], first["callId"]);
    assert_eq!(get_ok(&app, "dev-1").await, second);
}

#[tokio::test]
async fn scheduled_at_must_be_10_seconds_to_30_days_ahead_with_an_offset() {
    let (app, _clock) = app_at_now().await;
    let cases: Vec<(&str, Value, bool)> = vec![
        ("9 s ahead", json!("2026-03-01T09:00:09+09:00"), false),
        ("10 s ahead", json!("2026-03-01T09:00:10+09:00"), true),
        ("30 days ahead", json!("2026-03-31T00:00:00Z"), true),
        ("30 days + 1 s ahead", json!("2026-03-31T00:00:01Z"), false),
        ("now", json!(NOW), false),
        ("in the past", json!("2026-02-28T23:59:00Z"), false),
        ("a year ahead", json!("2027-03-01T00:00:00Z"), false),
        ("without offset", json!("2026-03-01T09:00:30"), false),
        ("date only", json!("2026-03-02"), false),
        ("not a date", json!("tomorrow at nine"), false),
        ("empty", json!(""), false),
        ("a number", json!(1772323230), false),
        ("an object", json!({"at": AT}), false),
        ("null", Value::Null, false),
    ];
    for (i, (case, at, ok)) in cases.into_iter().enumerate() {
        let device = format!("dev-{i}");
        register(&app, &device).await;
        let response = post_raw(&app, &json!({"deviceId": device, "scheduledAt": at})).await;
        if ok {
            assert_eq!(response.status().as_u16(), 201, "{case}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["scheduledAt"], at, "{case}");
        } else {
            assert_eq!(response.status().as_u16(), 400, "{case}");
            invalid_field(response, "scheduledAt").await;
        }
    }
    let response = post_raw(&app, &json!({"deviceId": "dev-0"})).await;
    invalid_field(response, "scheduledAt").await;
}

#[tokio::test]
async fn caller_name_is_1_to_64_characters() {
    let (app, _clock) = app_at_now().await;
    let cases: Vec<(&str, Value, bool)> = vec![
        ("64 ASCII chars", json!("n".repeat(64)), true),
        ("64 Japanese chars", json!("あ".repeat(64)), true),
        ("null", Value::Null, true),
        ("65 chars", json!("n".repeat(65)), false),
        ("65 Japanese chars", json!("あ".repeat(65)), false),
        ("empty", json!(""), false),
        ("a number", json!(7), false),
        ("an array", json!(["Koe"]), false),
    ];
    for (i, (case, name, ok)) in cases.into_iter().enumerate() {
        let device = format!("dev-{i}");
        register(&app, &device).await;
        let response = post_raw(
            &app,
            &json!({"deviceId": device, "scheduledAt": AT, "callerName": name}),
        )
        .await;
        if ok {
            assert_eq!(response.status().as_u16(), 201, "{case}");
            let body: Value = response.json().await.unwrap();
            if name.is_null() {
                assert!(body.get("callerName").is_none(), "{case}: {body}");
            } else {
                assert_eq!(body["callerName"], name, "{case}");
            }
        } else {
            assert_eq!(response.status().as_u16(), 400, "{case}");
            invalid_field(response, "callerName").await;
        }
    }
}

#[tokio::test]
async fn post_bodies_that_are_not_a_reservation_are_400_naming_the_field() {
    let (app, _clock) = app_at_now().await;
    register(&app, "dev-1").await;
    let cases: Vec<(&str, String, &str)> = vec![
        ("malformed JSON", "{".to_owned(), "body"),
        ("empty body", String::new(), "body"),
        ("array", "[]".to_owned(), "body"),
        (
            "deviceId missing",
            json!({"scheduledAt": AT}).to_string(),
            "deviceId",
        ),
        (
            "deviceId bad chars",
            json!({"deviceId": "a b", "scheduledAt": AT}).to_string(),
            "deviceId",
        ),
        (
            "deviceId a number",
            json!({"deviceId": 1, "scheduledAt": AT}).to_string(),
            "deviceId",
        ),
        (
            "over 8 KiB",
            json!({"deviceId": "dev-1", "scheduledAt": AT, "pad": "x".repeat(8 * 1024)})
                .to_string(),
            "body",
        ),
    ];
    for (case, body, field) in cases {
        let response = send(app.agent(http::Method::POST, "/calls").body(body)).await;
        assert_eq!(response.status().as_u16(), 400, "{case}");
        invalid_field(response, field).await;
    }
    let response = get(&app, "dev-1").await;
    error_body(response, 404, "NOT_FOUND").await;
}
