//! Log audit: every route of `koe::ROUTES` is called through the real local server, with
//! sentinel personal data wherever such data can go. That covers message contents, the model's
//! replies, calendar titles and times, VoIP tokens, caller names, API keys (the agent's and
//! OpenAI's), ID tokens and their claims, and device ids in clear. Each route is called on its
//! success path and on the refusals that repeat input back (400, 401, 404, 409), on the memory
//! store, on DynamoDB Local and on a DynamoDB that is down. A trace-level capture of everything
//! the process logs (`koe_testkit::logs::capture`, the production JSON format, dependencies
//! included) must then hold none of the sentinels. The device ids may appear only as their
//! salted hash.
//!
//! Coverage follows the route table: every route's endpoint runs through `exercise` (a route
//! without a scenario of its own sends its `events/` fixture, as committed and with sentinel
//! strings), and the test fails if any route of `ROUTES` left no access-log line in a pass. Beyond each route's
//! success and refusals, the paths that carry a credential or answer from a kept record: requests
//! sending `X-Device-Secret` (its issued value, and its hash, must never be logged; a made-up
//! one neither), 403 `DEVICE_SECRET_REQUIRED` on `PUT /devices`, `/calls`, `/calls/confirm` and, with
//! `AGENT_REQUIRE_DEVICE_SECRET` on (a second app on the pass's store), `POST /agent`; and an
//! `Idempotency-Key` (a sentinel) replayed, reused with another body and replayed once its
//! reservation is gone.
//!
//! Its own test binary, so the capture sees only this binary's runs.

mod exercise;
mod from_fixture;
mod pass;
mod scenarios;
mod sentinels;

use std::sync::Arc;

use koe::ROUTES;
use koe::domain::device::DeviceId;
use koe::store::dynamodb::DynamoStore;
use koe::store::prelude::*;
use koe_testkit::dynamodb;
use koe_testkit::logs::{self, LogCapture};
use serde_json::Value;

use crate::exercise::exercise;
use crate::pass::Pass;
use crate::sentinels::*;

fn assert_no_sentinel(capture: &LogCapture, tokens: &[String]) {
    let mut forbidden = forbidden();
    for token in tokens {
        forbidden.push(token.clone());
        for part in token.split('.') {
            forbidden.push(part.to_owned()); // header, claims, signature: each on its own
        }
    }
    capture.assert_none_of(&forbidden);
}

/// The access-log lines (`message: request`) captured from `offset` on, as (method, route).
fn routes_logged(capture: &LogCapture, offset: usize) -> Vec<(String, String)> {
    capture.lines()[offset..]
        .iter()
        .filter(|l| l["message"] == "request")
        .map(|l| {
            (
                l["method"].as_str().unwrap_or_default().to_owned(),
                l["route"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_on_every_store_logs_no_personal_data() {
    let capture = logs::capture();
    tracing::info!(probe = "log-audit-probe", "capture check");

    // A DynamoDB that is down: a closed port. Without retries, so that every call fails at
    // once (what is audited here is what the failures log, not how long they take).
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let down: Arc<dyn Store> = Arc::new(DynamoStore::new(
        aws_sdk_dynamodb::Client::from_conf(
            dynamodb::config_builder(&closed)
                .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
                .build(),
        ),
        koe::store::TableNames {
            devices: "devices".into(),
            calls: "scheduledCalls".into(),
            usage: "agentUsage".into(),
        },
    ));
    let dynamo: Arc<dyn Store> = Arc::new(dynamodb::fresh_store().await);
    let passes = [
        ("memory", None, false),
        ("dynamodb", Some(dynamo), false),
        ("dynamodb-down", Some(down), true),
    ];

    let mut tokens = Vec::new();
    for (name, store, is_down) in passes {
        let mut pass = Pass::start(name, store, is_down).await;
        let offset = capture.lines().len();
        for route in ROUTES.iter() {
            exercise(&mut pass, route).await;
        }
        // Every route of the table left its access-log line in this pass.
        let logged = routes_logged(&capture, offset);
        for route in ROUTES.iter() {
            assert!(
                logged
                    .iter()
                    .any(|(m, r)| *m == route.method.as_str() && r == route.path),
                "{name} pass: {} {} was not exercised (no access-log line)",
                route.method,
                route.path
            );
        }
        // Devices appear as their salted hash (positive control), never in clear.
        let contents = capture.contents();
        let hash = DeviceId::parse("deviceId", &pass.devices.dispatched)
            .unwrap()
            .log_hash(SALT);
        if !is_down {
            assert!(
                contents.contains(&hash),
                "{name} pass: the pushed device's hash is logged"
            );
        }
        for id in pass.devices.all() {
            assert!(!contents.contains(id), "{name} pass: {id} in clear");
        }
        tokens.append(&mut pass.tokens);
    }

    let lines = capture.lines();
    let logged = |line: fn(&serde_json::Value) -> bool| lines.iter().any(line);
    for (seen, control) in [
        (
            logged(|l| l["probe"] == "log-audit-probe"),
            "the capture works",
        ),
        (
            logged(|l| l["message"] == "voip push (logged, not sent)"),
            "the logging push sender's line was captured",
        ),
        (
            logged(|l| l["code"] == "SERVICE_UNAVAILABLE"),
            "the outage pass was logged",
        ),
        (
            logged(|l| l["error"].as_str().is_some_and(|e| e.contains("DynamoDB"))),
            "the DynamoDB SDK's errors were logged, and so audited",
        ),
    ] {
        assert!(seen, "{control} (positive control)");
    }
    for code in [
        "DEVICE_SECRET_REQUIRED",
        "IDEMPOTENCY_KEY_REUSED",
        "RESERVATION_GONE",
    ] {
        assert!(
            lines.iter().any(|l| l["code"] == code),
            "{code} was answered, and so audited (positive control)"
        );
    }
    for message in [
        "reservation answer replayed for a repeated Idempotency-Key",
        "agent round 1 refused: the device's proven secret was not presented",
    ] {
        assert!(
            lines.iter().any(|l| l["message"] == message),
            "\"{message}\" was logged, and so audited (positive control)"
        );
    }
    assert_every_request_line_has_its_id(&lines);
    assert_no_sentinel(&capture, &tokens);
}

/// Every line logged while a request was answered carries the request's id (`span.request_id`,
/// the same id as its access-log line and its `x-request-id` header), and handler lines really
/// are among them (the SDK's errors, logged when the outage pass answered 503).
fn assert_every_request_line_has_its_id(lines: &[Value]) {
    let answered: std::collections::HashSet<&str> = lines
        .iter()
        .filter(|l| l["message"] == "request")
        .filter_map(|l| l["request_id"].as_str())
        .collect();
    assert!(!answered.is_empty(), "access-log lines carry request_id");
    let in_requests: Vec<&Value> = lines
        .iter()
        .filter(|l| l["span"]["name"] == "request")
        .collect();
    for line in &in_requests {
        let id = line["span"]["request_id"].as_str().unwrap_or_default();
        assert!(
            answered.contains(id),
            "a line logged inside a request names a request that was answered: {line}"
        );
    }
    assert!(
        in_requests.iter().any(|l| l["message"] != "request"
            && l["error"].as_str().is_some_and(|e| e.contains("DynamoDB"))),
        "the store's error lines, logged while answering, carry the request id"
    );
    for line in lines.iter().filter(|l| l["message"] == "request") {
        assert_eq!(
            line["span"]["request_id"], line["request_id"],
            "the access-log line is inside its request's span: {line}"
        );
    }
}
