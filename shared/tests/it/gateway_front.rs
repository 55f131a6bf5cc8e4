//! The gateway front itself (`koe_testkit::gateway`, whatever `KOE_TEST_FRONT` says): requests
//! reach the endpoints as API Gateway HTTP API payload v2 events read by lambda_http, and what
//! no function answers gets API Gateway's own answers.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use http_body_util::BodyExt;
use koe::Api;
use koe_testkit::gateway::{self, PAYLOAD_LIMIT};
use koe_testkit::harness::{Front, TestApp, error_body, gateway_error, send, spawn_app_on};
use lambda_http::RequestExt;
use lambda_http::request::LambdaRequest;
use serde_json::{Value, json};

async fn gateway_app() -> TestApp {
    let app = spawn_app_on(Front::Lambda, &[], |app| app).await;
    assert_eq!(app.front(), Front::Lambda);
    app
}

/// The one event the gateway sent for the last request.
fn last_event(app: &TestApp) -> Value {
    app.gateway_events().pop().expect("an event was sent")
}

#[tokio::test]
async fn a_non_utf8_body_arrives_base64_encoded_and_is_decoded() {
    let app = gateway_app().await;
    let body = b"{\"deviceId\": \"dev-\xff\"}".to_vec();
    let response = send(app.agent(http::Method::POST, "/calls").body(body.clone())).await;
    // The function parsed the very bytes sent: JSON's complaint points at the 0xFF, not at the
    // first byte of a base64 text.
    let error = serde_json::from_slice::<Value>(&body).unwrap_err();
    assert!(error.column() > 1, "{error}");
    let answer = error_body(response, 400, "INVALID_REQUEST").await;
    assert_eq!(
        answer["message"],
        format!("body is not valid JSON (line 1, column {})", error.column())
    );
    let event = last_event(&app);
    assert_eq!(event["isBase64Encoded"], true);
    assert_eq!(event["body"], BASE64.encode(&body));
    // Text stays text.
    send(
        app.agent(http::Method::POST, "/calls")
            .body("{\"deviceId\": 1}"),
    )
    .await;
    let event = last_event(&app);
    assert_eq!(event["isBase64Encoded"], false);
    assert_eq!(event["body"], "{\"deviceId\": 1}");
}

#[tokio::test]
async fn a_query_string_reaches_get_calls() {
    let app = gateway_app().await;
    let response = send(app.agent(http::Method::GET, "/calls?deviceId=gw-dev-1&x=a&x=b")).await;
    // Read from the query: the device has no reservation (without the query it would be a 400
    // naming deviceId).
    error_body(response, 404, "NOT_FOUND").await;
    let event = last_event(&app);
    assert_eq!(event["routeKey"], "GET /calls");
    assert_eq!(event["rawPath"], "/calls");
    assert_eq!(event["rawQueryString"], "deviceId=gw-dev-1&x=a&x=b");
    assert_eq!(
        event["queryStringParameters"],
        json!({"deviceId": "gw-dev-1", "x": "a,b"})
    );
    let response = send(app.agent(http::Method::GET, "/calls")).await;
    let answer = error_body(response, 400, "INVALID_REQUEST").await;
    assert!(answer["message"].as_str().unwrap().starts_with("deviceId "));
    assert_eq!(last_event(&app).get("queryStringParameters"), None);
}

#[tokio::test]
async fn the_event_is_lambda_https_payload_v2() {
    let app = gateway_app().await;
    let response = send(
        app.agent(http::Method::GET, "/calls?deviceId=gw-dev-2")
            .header("x-twice", "a")
            .header("x-twice", "b")
            .header("cookie", "c1=1; c2=2"),
    )
    .await;
    assert_eq!(response.status().as_u16(), 404);
    let request_id = response.headers()["apigw-requestid"].to_str().unwrap();
    let event = last_event(&app);
    assert_eq!(event["version"], "2.0");
    assert_eq!(event["requestContext"]["requestId"], request_id);
    assert_eq!(event["headers"]["x-twice"], "a,b");
    assert_eq!(event["cookies"], json!(["c1=1", "c2=2"]));
    assert_eq!(event["headers"].get("cookie"), None, "cookies are apart");
    let LambdaRequest::ApiGatewayV2(v2) = serde_json::from_value(event.clone()).unwrap() else {
        panic!("not read as payload v2: {event}");
    };
    assert_eq!(v2.route_key.as_deref(), Some("GET /calls"));
    assert_eq!(v2.request_context.http.method, http::Method::GET);
    assert_eq!(v2.request_context.stage.as_deref(), Some("$default"));
    assert_eq!(v2.raw_query_string.as_deref(), Some("deviceId=gw-dev-2"));
    // And as the handler sees it.
    let request = http::Request::from(LambdaRequest::ApiGatewayV2(v2));
    assert_eq!(request.uri().path(), "/calls");
    assert_eq!(
        request.query_string_parameters().first("deviceId"),
        Some("gw-dev-2")
    );
    assert_eq!(request.headers()["cookie"], "c1=1; c2=2");
    assert_eq!(
        request.headers()["x-api-key"],
        koe_testkit::harness::TEST_API_KEY
    );
}

#[tokio::test]
async fn what_no_route_matches_gets_api_gateways_404() {
    let app = gateway_app().await;
    for (base, method, path) in [
        (&app.chat_url, http::Method::GET, "/nope"),
        (&app.chat_url, http::Method::DELETE, "/health"),
        (&app.chat_url, http::Method::GET, "/health/"),
        (&app.agent_url, http::Method::GET, "/health"),
        (&app.agent_url, http::Method::PATCH, "/calls"),
    ] {
        let response = app
            .client
            .request(method, format!("{base}{path}"))
            .send()
            .await
            .unwrap();
        gateway_error(response, 404, "Not Found").await;
    }
    assert!(app.gateway_events().is_empty(), "no function was invoked");
    assert!(app.events.published().is_empty());
}

#[tokio::test]
async fn a_body_over_10_mb_gets_api_gateways_413() {
    let app = gateway_app().await;
    // Announced, and streamed without a length: both stop at the cap.
    let announced = vec![b'x'; PAYLOAD_LIMIT + 1];
    let response = app.post_chat(announced).await;
    gateway_error(response, 413, "Request Entity Too Large").await;
    let addr = app.chat_url.trim_start_matches("http://").to_owned();
    let (line, sent) = tokio::task::spawn_blocking(move || chunked_until_answered(&addr))
        .await
        .unwrap();
    assert!(line.starts_with("HTTP/1.1 413"), "{line}");
    // Read up to the cap (the 11th MiB is refused), and no further.
    assert!(
        (PAYLOAD_LIMIT..64 * 1024 * 1024).contains(&sent),
        "answered after {sent} bytes"
    );
    assert!(app.gateway_events().is_empty(), "no function was invoked");
}

/// Streams a chunked body of 1 MiB chunks (up to 64 MiB) to POST /api/chat until an answer
/// comes; returns its status line and the body bytes written by then.
fn chunked_until_answered(addr: &str) -> (String, usize) {
    use koe_testkit::raw_http::status_line_while_sending;
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(addr).expect("connects");
    write!(
        stream,
        "POST /api/chat HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         transfer-encoding: chunked\r\n\r\n"
    )
    .unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    status_line_while_sending(stream, |mut writer| {
        let chunk = vec![b'x'; 1024 * 1024];
        let mut sent = 0;
        while sent < 64 * 1024 * 1024 {
            let written = write!(writer, "{:x}\r\n", chunk.len())
                .and_then(|()| writer.write_all(&chunk))
                .and_then(|()| writer.write_all(b"\r\n"));
            if written.is_err() {
                break;
            }
            sent += chunk.len();
        }
        sent
    })
}

#[tokio::test]
async fn dispatch_requests_go_through_the_dispatch_entrypoint() {
    let app = gateway_app().await;
    let response = app
        .bare(
            http::Method::POST,
            format!("{}/internal/dispatch", app.agent_url),
        )
        .await;
    // The dispatch function answered (API Gateway's shape from `dispatch::handle`): the
    // contract's 401, not a gateway error.
    error_body(response, 401, "UNAUTHORIZED").await;
    let event = last_event(&app);
    assert_eq!(event["routeKey"], "POST /internal/dispatch");
    assert_eq!(
        event["requestContext"]["apiId"],
        Api::Agent.template_id().to_lowercase()
    );
}

#[tokio::test]
async fn a_function_response_becomes_api_gateways_answer() {
    let out = json!({
        "statusCode": 201,
        "headers": {"content-type": "application/octet-stream", "x-one": "1"},
        "multiValueHeaders": {},
        "cookies": ["a=1", "b=2"],
        "body": BASE64.encode([0u8, 0xff, 1]),
        "isBase64Encoded": true,
    });
    let answer = gateway::http_response(out.to_string().as_bytes());
    assert_eq!(answer.status(), 201);
    assert_eq!(answer.headers()["x-one"], "1");
    let cookies: Vec<_> = answer.headers().get_all("set-cookie").iter().collect();
    assert_eq!(cookies, ["a=1", "b=2"]);
    let bytes = answer.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(bytes.as_ref(), [0u8, 0xff, 1]);
    // JSON without a statusCode is a 200 with that JSON as its body.
    let answer = gateway::http_response(br#"{"ok": true}"#);
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["content-type"], "application/json");
}
