//! GET /health, GET /api/info, GET /api/error and route misses, over HTTP through the test front
//! (a route miss is koe-local's 404/405 contract error, or API Gateway's own 404).

use koe_testkit::harness::{error_body, route_miss, spawn_app};
use serde_json::{Value, json};

async fn json_of(response: reqwest::Response) -> Value {
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "content-type"
    );
    response.json().await.expect("body is JSON")
}

#[tokio::test]
async fn health_answers_200_status_ok_exactly() {
    let app = spawn_app(&[]).await;
    let response = app.get("/health").await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(json_of(response).await, json!({"status": "ok"}));
    assert!(app.events.published().is_empty(), "no notification");
}

#[tokio::test]
async fn info_defaults_to_no_maintenance_version_1_0_0_and_a_null_message() {
    let app = spawn_app(&[]).await;
    let response = app.get("/api/info").await;
    assert_eq!(response.status().as_u16(), 200);
    let body = json_of(response).await;
    assert_eq!(
        body,
        json!({"maintenance": false, "minimumVersion": "1.0.0", "message": null})
    );
    let object = body.as_object().unwrap();
    assert!(
        object.contains_key("message"),
        "message is present as null, not omitted: {body}"
    );
}

#[tokio::test]
async fn info_reports_the_configured_maintenance_version_and_message() {
    let app = spawn_app(&[
        ("MAINTENANCE_MODE", "true"),
        ("MINIMUM_VERSION", "2.1.0"),
        ("INFO_MESSAGE", "Back at 10:00 UTC"),
    ])
    .await;
    let response = app.get("/api/info").await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        json_of(response).await,
        json!({"maintenance": true, "minimumVersion": "2.1.0", "message": "Back at 10:00 UTC"})
    );
}

#[tokio::test]
async fn error_test_answers_500_test_error_and_publishes_one_notification() {
    let app = spawn_app(&[]).await;
    let response = app.get("/api/error").await;
    let request_id = response
        .headers()
        .get("x-request-id")
        .expect("x-request-id header")
        .to_str()
        .unwrap()
        .to_owned();
    assert!(!request_id.is_empty(), "x-request-id is not empty");
    error_body(response, 500, "TEST_ERROR").await;

    let published = app.events.published();
    assert_eq!(published.len(), 1, "one notification: {published:?}");
    let n = &published[0];
    assert_eq!(n.code, "TEST_ERROR");
    assert_eq!(n.route, "GET /api/error");
    assert_eq!(n.function, "error-test");
    assert_eq!(n.status, 500);
    assert_eq!(
        n.request_id, request_id,
        "notification names the answer's request"
    );
}

#[tokio::test]
async fn an_unknown_path_is_a_route_miss() {
    let app = spawn_app(&[]).await;
    for path in ["/nope", "/api", "/api/chat/extra", "/health/"] {
        route_miss(app.get(path).await, None).await;
    }
    assert!(app.events.published().is_empty(), "404 publishes nothing");
}

#[tokio::test]
async fn a_wrong_method_on_health_is_a_route_miss_allowing_get() {
    let app = spawn_app(&[]).await;
    let response = app
        .bare(http::Method::DELETE, format!("{}/health", app.chat_url))
        .await;
    route_miss(response, Some("GET")).await;
}

#[tokio::test]
async fn a_wrong_method_on_chat_is_a_route_miss_allowing_post() {
    let app = spawn_app(&[]).await;
    route_miss(app.get("/api/chat").await, Some("POST")).await;
    assert_eq!(app.openai.request_count(), 0);
}

#[tokio::test]
async fn the_agent_port_does_not_serve_chat_routes() {
    let app = spawn_app(&[]).await;
    for path in ["/health", "/api/info", "/api/error"] {
        let response = app
            .bare(http::Method::GET, format!("{}{path}", app.agent_url))
            .await;
        route_miss(response, None).await;
    }
    assert!(app.events.published().is_empty());
}
