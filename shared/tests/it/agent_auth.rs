//! `X-Api-Key` on the agent API, over HTTP through the test front: every agent route of
//! `koe::ROUTES` (iterated, so a new route is covered the day it is added) refuses a missing or
//! wrong key with 401 before its body is read (koe-local: before it arrives; behind API
//! Gateway, which buffers every body, once it is in), and accepts every configured (rotated)
//! key.

use koe::platform::endpoint::Auth;
use koe::{Api, ROUTES, Route};
use std::time::Duration;

use koe_testkit::harness::{Front, TEST_API_KEY, TestApp, error_body, send, spawn_app};

/// The second key of a rotation: both must work while clients move over.
const ROTATED_KEY: &str = "rotated-key-abcdef";

fn agent_routes() -> Vec<&'static Route> {
    // POST /internal/dispatch is on the agent API but takes an OIDC ID token instead of the key
    // (its refusals are in oidc/).
    let routes: Vec<&Route> = ROUTES
        .iter()
        .filter(|r| r.api == Api::Agent && r.auth == Auth::ApiKey)
        .collect();
    assert!(
        routes.len() >= 4,
        "the agent API has PUT /devices and POST, GET, DELETE /calls: {routes:?}"
    );
    routes
}

fn chat_routes() -> Vec<&'static Route> {
    ROUTES.iter().filter(|r| r.api == Api::Chat).collect()
}

fn name(route: &Route) -> String {
    format!("{} {}", route.method, route.path)
}

async fn rotated_app() -> TestApp {
    let keys = format!("{TEST_API_KEY},{ROTATED_KEY}");
    spawn_app(&[("AGENT_API_KEYS", &keys)]).await
}

/// Asserts the 401 with the union error body, naming the case on failure.
async fn assert_unauthorized(response: reqwest::Response, case: &str) {
    let status = response.status().as_u16();
    assert_eq!(status, 401, "{case}: status");
    error_body(response, 401, "UNAUTHORIZED").await;
}

/// `route` with `key` (`None`: no key) and `body` is refused as unauthorized; `case` names how.
async fn assert_route_refuses(
    app: &TestApp,
    route: &Route,
    key: Option<&str>,
    body: &'static str,
    case: &str,
) {
    let (method, path) = (route.method.clone(), route.path);
    let request = match key {
        Some(key) => app.agent_with_key(method, path, key),
        None => app.agent_unauthenticated(method, path),
    };
    let response = send(request.body(body)).await;
    assert_unauthorized(response, &format!("{}: {case}", name(route))).await;
}

/// Keys that must not open the agent API when the configured keys are `TEST_API_KEY` and
/// `ROTATED_KEY`.
fn wrong_keys() -> Vec<(&'static str, String)> {
    let mut same_length = TEST_API_KEY.to_owned();
    same_length.pop();
    same_length.push('X');
    assert_eq!(same_length.len(), TEST_API_KEY.len());
    vec![
        ("empty key", String::new()),
        ("wrong key of the same length", same_length),
        ("differently-sized key", "nope".to_owned()),
        (
            "prefix of a real key",
            TEST_API_KEY[..TEST_API_KEY.len() - 1].to_owned(),
        ),
        ("real key plus one char", format!("{TEST_API_KEY}0")),
        ("real key in another case", TEST_API_KEY.to_uppercase()),
        (
            "the rotated key in another case",
            ROTATED_KEY.to_uppercase(),
        ),
        ("both keys joined", format!("{TEST_API_KEY},{ROTATED_KEY}")),
    ]
}

// ---------------------------------------------------------------------------------------------
// Refusals

#[tokio::test]
async fn every_agent_route_refuses_a_missing_key() {
    let app = rotated_app().await;
    for route in agent_routes() {
        assert_route_refuses(&app, route, None, "{}", "no key").await;
    }
    assert!(app.events.published().is_empty(), "a 401 is not notified");
}

#[tokio::test]
async fn every_agent_route_refuses_every_wrong_key() {
    let app = rotated_app().await;
    for route in agent_routes() {
        for (case, key) in wrong_keys() {
            assert_route_refuses(&app, route, Some(&key), "{}", case).await;
        }
    }
    assert!(app.events.published().is_empty(), "a 401 is not notified");
}

#[tokio::test]
async fn without_configured_keys_every_key_is_refused_even_an_empty_one() {
    let app = spawn_app(&[("AGENT_API_KEYS", "")]).await;
    for route in agent_routes() {
        for key in ["", TEST_API_KEY] {
            assert_route_refuses(&app, route, Some(key), "{}", &format!("key {key:?}")).await;
        }
        let response = send(app.agent_unauthenticated(route.method.clone(), route.path)).await;
        assert_unauthorized(response, &format!("{}: no key", name(route))).await;
    }
}

/// PUT /devices for `device` with `token`, sent with the agent key `key`.
async fn put_device(app: &TestApp, key: &str, device: &str, token: &str) -> reqwest::Response {
    let body = serde_json::json!({"deviceId": device, "voipToken": token});
    send(
        app.agent_with_key(http::Method::PUT, "/devices", key)
            .body(body.to_string()),
    )
    .await
}

#[tokio::test]
async fn a_refused_request_changes_nothing() {
    let app = rotated_app().await;
    let response = put_device(&app, "wrong-key", "auth-device-1", &"ab".repeat(32)).await;
    assert_unauthorized(response, "PUT /devices with a wrong key").await;
    let id = koe::domain::device::DeviceId::parse("deviceId", "auth-device-1").unwrap();
    assert!(
        app.store
            .get_device(&id, chrono::Utc::now())
            .await
            .unwrap()
            .is_none(),
        "nothing stored"
    );
}

// ---------------------------------------------------------------------------------------------
// The key comes before the body

#[tokio::test]
async fn the_key_is_checked_before_an_invalid_json_body() {
    let app = rotated_app().await;
    for route in agent_routes() {
        assert_route_refuses(&app, route, None, "{not json", "invalid JSON, no key").await;
        let wrong = Some("wrong-key");
        assert_route_refuses(&app, route, wrong, "{not json", "invalid JSON, wrong key").await;
    }
}

#[tokio::test]
async fn the_key_is_checked_before_an_oversized_body() {
    let app = rotated_app().await;
    let oversized = format!(r#"{{"pad": "{}"}}"#, "x".repeat(100 * 1024));
    for route in agent_routes() {
        let response = send(
            app.agent_unauthenticated(route.method.clone(), route.path)
                .body(oversized.clone()),
        )
        .await;
        assert_unauthorized(response, &format!("{}: 100 KB body, no key", name(route))).await;
    }
    // With the key, the same body is the size cap's 400.
    let response = send(app.agent(http::Method::PUT, "/devices").body(oversized)).await;
    let body = error_body(response, 400, "INVALID_REQUEST").await;
    assert!(
        body["message"].as_str().unwrap().starts_with("body "),
        "{body}"
    );
}

/// Sends the head of a request announcing a 4096-byte body, then waits for the answer's status
/// line, for at most `wait`. With `then_body`, the body follows if nothing came by then, and the
/// answer is waited for again (5 s). Returns what came before the body (`None`: nothing) and
/// the status line in the end.
fn status_lines(agent_url: &str, head: &str, wait: Duration, then_body: bool) -> [String; 2] {
    use koe_testkit::raw_http::read_status_line;
    use std::io::Write;
    let addr = agent_url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).expect("connects");
    stream.set_read_timeout(Some(wait)).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    let before = read_status_line(&mut stream);
    if !then_body || !before.is_empty() {
        return [before.clone(), before];
    }
    stream.write_all(&[b' '; 4096]).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let after = read_status_line(&mut stream);
    [before, after]
}

#[tokio::test]
async fn the_key_is_refused_without_waiting_for_the_body() {
    let app = rotated_app().await;
    for route in agent_routes() {
        let head = format!(
            "{} {} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
             content-length: 4096\r\n\r\n",
            route.method, route.path
        );
        let url = app.agent_url.clone();
        let front = app.front();
        let [before, after] = tokio::task::spawn_blocking(move || match front {
            // The body never comes: the answer does not wait for it.
            Front::Local => status_lines(&url, &head, Duration::from_secs(5), false),
            // API Gateway invokes the function with the whole body only: nothing is answered
            // before the body is in, and then the function refuses the key.
            Front::Lambda => status_lines(&url, &head, Duration::from_millis(300), true),
        })
        .await
        .unwrap();
        match app.front() {
            Front::Local => assert!(
                before.starts_with("HTTP/1.1 401"),
                "{}: {before}",
                name(route)
            ),
            Front::Lambda => assert_eq!(before, "", "{}: answered before the body", name(route)),
        }
        assert!(
            after.starts_with("HTTP/1.1 401"),
            "{}: {after}",
            name(route)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Accepted keys

#[tokio::test]
async fn both_rotated_keys_are_accepted_on_every_agent_route() {
    let app = rotated_app().await;
    for route in agent_routes() {
        for key in [TEST_API_KEY, ROTATED_KEY] {
            // An empty object (or no query): past the key, the request itself is invalid.
            let response = send(
                app.agent_with_key(route.method.clone(), route.path, key)
                    .body("{}"),
            )
            .await;
            let status = response.status().as_u16();
            assert_ne!(status, 401, "{} with key {key}", name(route));
            error_body(response, 400, "INVALID_REQUEST").await;
        }
    }
}

#[tokio::test]
async fn a_rotated_key_works_for_a_real_request() {
    let app = rotated_app().await;
    let response = put_device(&app, ROTATED_KEY, "auth-device-2", &"cd".repeat(32)).await;
    assert_eq!(response.status().as_u16(), 200);
    let response = send(app.agent_with_key(
        http::Method::GET,
        "/calls?deviceId=auth-device-2",
        TEST_API_KEY,
    ))
    .await;
    error_body(response, 404, "NOT_FOUND").await;
}

// ---------------------------------------------------------------------------------------------
// Chat needs no key

#[tokio::test]
async fn chat_routes_need_no_key() {
    let app = rotated_app().await;
    let chat = chat_routes();
    assert!(!chat.is_empty());
    for route in chat {
        let body = if route.method == http::Method::POST {
            r#"{"messages": [{"role": "user", "content": "Hello?"}]}"#
        } else {
            ""
        };
        let response = app
            .client
            .request(
                route.method.clone(),
                format!("{}{}", app.chat_url, route.path),
            )
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        assert_ne!(status, 401, "{} without a key", name(route));
        if route.path == "/api/error" {
            error_body(response, 500, "TEST_ERROR").await;
        } else {
            assert_eq!(status, 200, "{} without a key", name(route));
        }
    }
}
