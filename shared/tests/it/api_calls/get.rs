//! GET /calls: the reservation in each state, the device id in the query.

use chrono::Duration;
use koe::domain::reservation::RunToken;
use koe::platform::clock::Clock;
use koe::store::Outcome;
use koe_testkit::harness::{error_body, invalid_field, send};
use serde_json::Value;

use super::{
    AT, ENDED, NOW_MILLIS, app_at_now, app_with_a_call, call_id, claim, create, device_id,
    ended_call, get, get_ok, register,
};

#[tokio::test]
async fn get_answers_the_reservation_in_each_state() {
    let (app, clock, created) = app_with_a_call("dev-1").await;

    let scheduled = get_ok(&app, "dev-1").await;
    assert_eq!(scheduled, created);
    assert_eq!(scheduled["status"], "scheduled");

    clock.advance(Duration::seconds(30));
    claim(&app, "dev-1", &created).await;
    let claimed = get_ok(&app, "dev-1").await;
    assert_eq!(claimed["status"], "claimed");
    assert_eq!(claimed["callId"], created["callId"]);
    assert_eq!(claimed["scheduledAt"], AT);
    assert_eq!(claimed["createdAt"], NOW_MILLIS);
    assert_eq!(claimed["updatedAt"], "2026-03-01T00:00:30.000Z");

    clock.advance(Duration::seconds(1));
    let now = clock.now();
    let done = app
        .store
        .finish_reservation(
            &device_id("dev-1"),
            &call_id(&created),
            Outcome::Sent,
            &RunToken::generate(),
            now,
            now - Duration::seconds(30),
        )
        .await
        .unwrap();
    assert!(done);
    let sent = get_ok(&app, "dev-1").await;
    assert_eq!(sent["status"], "sent");
    assert_eq!(sent["callId"], created["callId"]);
    assert_eq!(sent["updatedAt"], "2026-03-01T00:00:31.000Z");
}

#[tokio::test]
async fn get_answers_failed_and_missed_too() {
    let (app, _clock) = app_at_now().await;
    for (device, outcome, status) in ENDED {
        let created = ended_call(&app, device, outcome).await;
        let body = get_ok(&app, device).await;
        assert_eq!(body["status"], status);
        assert_eq!(body["callId"], created["callId"]);
    }
}

#[tokio::test]
async fn get_without_a_reservation_is_404_not_found() {
    let (app, _clock) = app_at_now().await;
    error_body(get(&app, "dev-unknown").await, 404, "NOT_FOUND").await;
    register(&app, "dev-registered").await;
    error_body(get(&app, "dev-registered").await, 404, "NOT_FOUND").await;
    assert!(app.events.published().is_empty());
}

#[tokio::test]
async fn get_and_delete_need_a_valid_device_id_in_the_query() {
    let (app, _clock) = app_at_now().await;
    let long = "d".repeat(129);
    let paths = [
        "/calls".to_owned(),
        "/calls?".to_owned(),
        "/calls?deviceId=".to_owned(),
        "/calls?deviceid=dev-1".to_owned(),
        "/calls?other=dev-1".to_owned(),
        "/calls?deviceId=a%20b".to_owned(),
        "/calls?deviceId=a%2Fb".to_owned(),
        "/calls?deviceId=%E3%81%82".to_owned(),
        format!("/calls?deviceId={long}"),
    ];
    for method in [http::Method::GET, http::Method::DELETE] {
        for path in &paths {
            let response = send(app.agent(method.clone(), path)).await;
            assert_eq!(response.status().as_u16(), 400, "{method} {path}");
            invalid_field(response, "deviceId").await;
        }
    }
}

#[tokio::test]
async fn a_percent_encoded_device_id_works_on_get_and_delete() {
    let (app, _clock) = app_at_now().await;
    let device = "urn:uuid:6F9619FF-8B86-D011";
    register(&app, device).await;
    let created = create(&app, device, AT).await;
    assert_eq!(created["deviceId"], device);

    let path = "/calls?deviceId=urn%3Auuid%3A6F9619FF-8B86-D011";
    let response = send(app.agent(http::Method::GET, path)).await;
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body, created);

    // Unencoded ':' is fine in a query too.
    let body = get_ok(&app, device).await;
    assert_eq!(body["deviceId"], device);
    let response = send(app.agent(http::Method::GET, &format!("/calls?deviceId={device}"))).await;
    assert_eq!(response.status().as_u16(), 200);

    let response = send(app.agent(http::Method::DELETE, path)).await;
    assert_eq!(response.status().as_u16(), 204);
    error_body(get(&app, device).await, 404, "NOT_FOUND").await;
}

#[tokio::test]
async fn other_query_parameters_are_ignored() {
    let (app, _clock, created) = app_with_a_call("dev-1").await;
    let response = send(app.agent(http::Method::GET, "/calls?x=1&deviceId=dev-1&y=2")).await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.json::<Value>().await.unwrap(), created);
}
