//! Fault injection, bad input: request bodies over the size cap, on every route of
//! `koe::ROUTES` (each `body_limit`: derived from the field caps for `POST /api/chat` and `POST /agent`, 8 KiB elsewhere). They are
//! refused with 400 naming the body, never parsed: an oversized body of broken JSON gets the
//! size answer, not a JSON error. A body far larger than anything the server keeps (1 GiB
//! announced, streamed until the server answers) is answered after the server has read at most
//! its drain cap (16 MiB), and the connection is closed. So a client cannot make the server
//! read, buffer or parse without bound. (Behind API Gateway, the gateway front, such a body
//! gets API Gateway's 413 at its 10 MB payload cap instead: no function sees it.)

use std::io::Write;
use std::time::{Duration, Instant};

use koe::ROUTES;
use koe::platform::endpoint::Auth;
use koe::{Api, Route};
use koe_testkit::harness::{Front, TEST_API_KEY, TestApp, error_body, front, spawn_app};
use koe_testkit::raw_http::status_line_while_sending;
use koe_testkit::{faults, gateway};

/// What the server reads of a refused body at most (`DRAIN_CAP` in `handlers/body.rs`).
const DRAIN_CAP: usize = 16 * 1024 * 1024;

fn base(app: &TestApp, api: Api) -> &str {
    match api {
        Api::Chat => &app.chat_url,
        Api::Agent => &app.agent_url,
    }
}

/// Headers that get a request past authentication, so that the body is what is judged.
fn credentials(route: &Route) -> Vec<(&'static str, String)> {
    if route.auth == Auth::Bearer {
        // Only the token's presence is checked before the body is read; the body cap comes
        // before the token is verified.
        vec![("authorization", "Bearer not-verified-yet".into())]
    } else if route.auth == Auth::ApiKey {
        vec![("x-api-key", TEST_API_KEY.into())]
    } else {
        Vec::new()
    }
}

#[tokio::test]
async fn every_route_refuses_a_body_over_its_cap_without_parsing_it() {
    let app = spawn_app(&[]).await;
    let mut observed = Vec::new();
    for route in ROUTES.iter() {
        let limit = route.body_limit;
        // Broken JSON, one byte over the cap: a parser would answer "not valid JSON".
        let body = format!("{{\"pad\": \"{}", "x".repeat(limit));
        assert!(body.len() > limit);
        let mut request = app
            .client
            .request(
                route.method.clone(),
                format!("{}{}", base(&app, route.api), route.path),
            )
            .header("content-type", "application/json")
            .body(body);
        for (name, value) in credentials(route) {
            request = request.header(name, value);
        }
        let response = request.send().await.expect("an answer");
        let body = error_body(response, 400, "INVALID_REQUEST").await;
        assert_eq!(
            body["message"],
            format!("body must be at most {limit} bytes"),
            "{} {}",
            route.method,
            route.path
        );
        observed.push(format!("{} {}", route.method, route.path));
    }
    assert_eq!(app.openai.request_count(), 0);
    assert!(app.events.published().is_empty(), "a 400 is not notified");
    faults::record(
        "Bad input: body over the cap, broken JSON, every route",
        "400 INVALID_REQUEST `body must be at most N bytes` (772 478 chat, 1 696 234 agent, 8 KiB else), never parsed",
        &format!(
            "{} routes: 400 `body must be at most N bytes`, 0 provider calls",
            observed.len()
        ),
    );
}

/// Announces a 1 GiB body and streams it until the server answers; returns the status line and
/// how many body bytes had been written by then.
fn stream_endless_body(addr: &str, method: &str, path: &str, headers: &str) -> (String, usize) {
    let mut stream = std::net::TcpStream::connect(addr).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         {headers}content-length: {}\r\n\r\n",
        1usize << 30
    )
    .unwrap();
    status_line_while_sending(stream, |mut writer| {
        let chunk = vec![b'x'; 64 * 1024];
        let mut sent = 0usize;
        while sent < 1 << 30 {
            match writer.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break, // the server closed the connection
            }
        }
        sent
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_body_is_refused_after_a_bounded_read() {
    let app = spawn_app(&[]).await;
    let mut observed = Vec::new();
    for (url, path, headers) in [
        (app.chat_url.clone(), "/api/chat", String::new()),
        (
            app.agent_url.clone(),
            "/agent",
            format!("x-api-key: {TEST_API_KEY}\r\n"),
        ),
        (
            app.agent_url.clone(),
            "/devices",
            format!("x-api-key: {TEST_API_KEY}\r\n"),
        ),
    ] {
        let method = if path == "/devices" { "PUT" } else { "POST" };
        let addr = url.trim_start_matches("http://").to_owned();
        let started = Instant::now();
        let (line, sent) = tokio::task::spawn_blocking({
            let (method, path) = (method.to_owned(), path.to_owned());
            move || stream_endless_body(&addr, &method, &path, &headers)
        })
        .await
        .unwrap();
        let took = started.elapsed();
        // koe-local reads up to its drain cap and answers 400; API Gateway refuses a body over
        // its 10 MB payload cap with 413 before invoking anything.
        let (status, cap) = match front() {
            Front::Local => ("HTTP/1.1 400", DRAIN_CAP),
            Front::Lambda => ("HTTP/1.1 413", gateway::PAYLOAD_LIMIT),
        };
        assert!(line.starts_with(status), "{method} {path}: {line}");
        // What the server read, plus what the sockets' buffers took in, is far below 1 GiB.
        assert!(
            sent < cap + 32 * 1024 * 1024,
            "{method} {path}: {sent} bytes went out before the answer"
        );
        observed.push(format!(
            "{method} {path} {} after {} MiB sent, {} ms",
            &status[9..],
            sent / (1024 * 1024),
            took.as_millis()
        ));
    }
    assert_eq!(app.openai.request_count(), 0);
    assert!(app.gateway_events().is_empty(), "no function was invoked");
    faults::record(
        "Bad input: 1 GiB body streamed without end",
        match front() {
            Front::Local => "400 once at most the 16 MiB drain cap is read; connection closed",
            Front::Lambda => "API Gateway's 413 (10 MB payload cap), no function invoked",
        },
        &observed.join("; "),
    );
}
