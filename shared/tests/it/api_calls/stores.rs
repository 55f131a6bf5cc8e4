//! The store behind /calls: a failing one is 503 after validation; the core flow on DynamoDB Local.

use std::sync::Arc;

use chrono::{Duration, Utc};
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{FailingStore, error_body, invalid_field, send, spawn_app_with};
use serde_json::{Value, json};

use super::super::api_calls_refusals::{AT_2035, NOW_2035};
use super::{claim, create, delete, get, get_ok, post_raw, register, token};

#[tokio::test]
async fn a_failing_store_is_a_503_with_a_notification_on_post_get_and_delete() {
    let app = spawn_app_with(&[], |app| app.with_store(Arc::new(FailingStore))).await;
    let in_a_minute = (Utc::now() + Duration::minutes(1)).to_rfc3339();
    let requests = [
        (
            app.agent(http::Method::POST, "/calls")
                .body(json!({"deviceId": "dev-1", "scheduledAt": in_a_minute}).to_string()),
            "POST /calls",
            "create-call",
        ),
        (
            app.agent(http::Method::GET, "/calls?deviceId=dev-1"),
            "GET /calls",
            "get-call",
        ),
        (
            app.agent(http::Method::DELETE, "/calls?deviceId=dev-1"),
            "DELETE /calls",
            "cancel-call",
        ),
    ];
    for (i, (request, route, function)) in requests.into_iter().enumerate() {
        let response = send(request).await;
        let request_id = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_owned();
        error_body(response, 503, "SERVICE_UNAVAILABLE").await;
        let published = app.events.published();
        assert_eq!(published.len(), i + 1, "{route}: one notification each");
        let n = &published[i];
        assert_eq!(n.code, "SERVICE_UNAVAILABLE", "{route}");
        assert_eq!(n.status, 503, "{route}");
        assert_eq!(n.route, route);
        assert_eq!(n.function, function, "{route}");
        assert_eq!(n.request_id, request_id, "{route}");
    }
}

#[tokio::test]
async fn validation_comes_before_the_store() {
    let app = spawn_app_with(&[], |app| app.with_store(Arc::new(FailingStore))).await;
    let response = post_raw(&app, &json!({"deviceId": "dev-1", "scheduledAt": "soon"})).await;
    invalid_field(response, "scheduledAt").await;
    let response = send(app.agent(http::Method::GET, "/calls")).await;
    invalid_field(response, "deviceId").await;
    assert!(app.events.published().is_empty());
}

// ---------------------------------------------------------------------------------------------
// DynamoDB Local

#[tokio::test]
async fn the_core_flow_works_on_dynamodb_local() {
    let store = Arc::new(koe_testkit::dynamodb::fresh_store().await);
    // In 2035: DynamoDB Local deletes items whose TTL has passed by the wall clock, mid-test
    // (docs/testing.md, "Time in DynamoDB Local tests").
    let clock = Arc::new(ManualClock::at_rfc3339(NOW_2035));
    let app = spawn_app_with(&[], |app| app.with_clock(clock.clone()).with_store(store)).await;
    let device = format!("ddb:{:016x}", fastrand::u64(..));

    // Not registered yet.
    let response = post_raw(&app, &json!({"deviceId": device, "scheduledAt": AT_2035})).await;
    error_body(response, 409, "DEVICE_NOT_REGISTERED").await;
    error_body(get(&app, &device).await, 404, "NOT_FOUND").await;

    register(&app, &device).await;
    let stored = app.stored_device(&device).await.unwrap();
    assert_eq!(stored.voip_token.expose(), token());

    let response = post_raw(
        &app,
        &json!({"deviceId": device, "scheduledAt": AT_2035, "callerName": "ミク"}),
    )
    .await;
    assert_eq!(response.status().as_u16(), 201);
    let created: Value = response.json().await.unwrap();
    assert_eq!(created["scheduledAt"], AT_2035);
    assert_eq!(created["status"], "scheduled");
    assert_eq!(created["createdAt"], "2035-03-01T00:00:00.000Z");
    assert_eq!(created["callerName"], "ミク");

    assert_eq!(get_ok(&app, &device).await, created, "round-trips DynamoDB");

    let response = post_raw(
        &app,
        &json!({"deviceId": device, "scheduledAt": "2035-03-01T10:00:00+09:00"}),
    )
    .await;
    error_body(response, 409, "RESERVATION_EXISTS").await;

    let response = delete(&app, &device).await;
    assert_eq!(response.status().as_u16(), 204);
    assert!(response.bytes().await.unwrap().is_empty());
    error_body(get(&app, &device).await, 404, "NOT_FOUND").await;
    error_body(delete(&app, &device).await, 404, "NOT_FOUND").await;

    // A new one, claimed: too late to cancel.
    let second = create(&app, &device, AT_2035).await;
    assert_ne!(second["callId"], created["callId"]);
    claim(&app, &device, &second).await;
    error_body(delete(&app, &device).await, 409, "TOO_LATE").await;
    assert_eq!(get_ok(&app, &device).await["status"], "claimed");
    assert!(app.events.published().is_empty(), "no 5xx on the way");
}
