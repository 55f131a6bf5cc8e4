//! GET /health, GET /api/info, GET /api/error and route misses, over HTTP against the real local
//! server.

use koe_testkit::harness::{error_body, spawn_app};
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
async fn unknown_path_is_404_not_found_with_the_error_body() {
    let app = spawn_app(&[]).await;
    for path in ["/nope", "/api", "/api/chat/extra", "/health/"] {
        let response = app.get(path).await;
        let body = error_body(response, 404, "NOT_FOUND").await;
        assert!(body["message"].is_string(), "{path}: {body}");
    }
    assert!(app.events.published().is_empty(), "404 publishes nothing");
}

#[tokio::test]
async fn wrong_method_on_health_is_405_with_allow_get() {
    let app = spawn_app(&[]).await;
    let response = app
        .client
        .delete(format!("{}/health", app.chat_url))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers().get("allow").map(|v| v.to_str().unwrap()),
        Some("GET"),
        "Allow header"
    );
    error_body(response, 405, "METHOD_NOT_ALLOWED").await;
}

#[tokio::test]
async fn wrong_method_on_chat_is_405_with_allow_post() {
    let app = spawn_app(&[]).await;
    let response = app.get("/api/chat").await;
    assert_eq!(
        response.headers().get("allow").map(|v| v.to_str().unwrap()),
        Some("POST"),
        "Allow header"
    );
    error_body(response, 405, "METHOD_NOT_ALLOWED").await;
    assert_eq!(app.openai.request_count(), 0);
}

#[tokio::test]
async fn the_agent_port_does_not_serve_chat_routes() {
    let app = spawn_app(&[]).await;
    for path in ["/health", "/api/info", "/api/error"] {
        let response = app
            .client
            .get(format!("{}{path}", app.agent_url))
            .send()
            .await
            .unwrap();
        error_body(response, 404, "NOT_FOUND").await;
    }
    assert!(app.events.published().is_empty());
}
