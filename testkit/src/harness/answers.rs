//! Sending a test's requests and asserting the contract's answers: errors, route misses, fields.

use super::{Front, front};

/// Sends a request built with `TestApp::agent*`.
pub async fn send(request: reqwest::RequestBuilder) -> reqwest::Response {
    request.send().await.expect("request reaches the app")
}

/// Sends the request, presenting the device's secret (`X-Device-Secret`) when it has one.
pub async fn send_with_secret(
    request: reqwest::RequestBuilder,
    secret: Option<&str>,
) -> reqwest::Response {
    match secret {
        Some(secret) => send(request.header("x-device-secret", secret)).await,
        None => send(request).await,
    }
}

/// A response header as text, if present.
pub fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

/// Asserts the contract's error body and returns it.
pub async fn error_body(response: reqwest::Response, status: u16, code: &str) -> serde_json::Value {
    assert_eq!(response.status().as_u16(), status, "status");
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "content-type"
    );
    let body: serde_json::Value = response.json().await.expect("error body is JSON");
    assert_eq!(body["code"], code, "code in {body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "message in {body}"
    );
    assert_eq!(
        body["error"], body["message"],
        "error mirrors message in {body}"
    );
    body
}

/// As [`error_body`]; returns the error's message.
pub async fn error_message(response: reqwest::Response, status: u16, code: &str) -> String {
    let body = error_body(response, status, code).await;
    body["message"].as_str().unwrap_or_default().to_owned()
}

/// Asserts the answer to a request that no route matches, as the front gives it: koe-local's
/// contract error (404 NOT_FOUND, or 405 METHOD_NOT_ALLOWED with `Allow: allow` when the path
/// has other methods), or API Gateway's own 404 `{"message":"Not Found"}` (an HTTP API has no
/// 405: a method without a route is a route that does not exist).
pub async fn route_miss(response: reqwest::Response, allow: Option<&str>) {
    match (front(), allow) {
        (Front::Local, None) => {
            error_body(response, 404, "NOT_FOUND").await;
        }
        (Front::Local, Some(allow)) => {
            assert_eq!(header(&response, "allow").as_deref(), Some(allow), "Allow");
            error_body(response, 405, "METHOD_NOT_ALLOWED").await;
        }
        (Front::Lambda, _) => {
            assert_eq!(
                header(&response, "allow"),
                None,
                "API Gateway sends no Allow"
            );
            gateway_error(response, 404, "Not Found").await;
        }
    }
}

/// Asserts one of API Gateway's own answers (no function ran): `status`, JSON
/// `{"message": message}` and nothing else.
pub async fn gateway_error(response: reqwest::Response, status: u16, message: &str) {
    assert_eq!(response.status().as_u16(), status, "status");
    assert_eq!(
        header(&response, "content-type").as_deref(),
        Some("application/json"),
        "content-type"
    );
    assert!(
        header(&response, "apigw-requestid").is_some(),
        "API Gateway's request id"
    );
    let body: serde_json::Value = response.json().await.expect("API Gateway's body is JSON");
    assert_eq!(body, serde_json::json!({ "message": message }));
}

/// Asserts a 400 INVALID_REQUEST whose message starts with `field` (the field it names).
pub async fn invalid_field(response: reqwest::Response, field: &str) -> serde_json::Value {
    let body = error_body(response, 400, "INVALID_REQUEST").await;
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!("{field} ")),
        "message names {field}: {body}"
    );
    body
}

/// The string `key` of each object of the array `list` (a plan's step ids, a round's
/// `stepId`s); panics if `list` is no array or an item lacks the string.
pub fn strings_of<'a>(list: &'a serde_json::Value, key: &str) -> Vec<&'a str> {
    let items = list
        .as_array()
        .unwrap_or_else(|| panic!("an array: {list}"));
    items
        .iter()
        .map(|item| {
            item[key]
                .as_str()
                .unwrap_or_else(|| panic!("{key}: {item}"))
        })
        .collect()
}
