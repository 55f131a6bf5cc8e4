//! No personal data in the logs of POST /agent: both rounds run with sentinel values in every
//! place personal data goes (the message, calendar titles and times, the model's replies, the
//! device id, the API and provider keys) through success, retried and failed model output,
//! validation errors, the daily limit and a failing counter, while a trace-level capture of
//! everything the process logs is scanned. Positive controls find the handlers' own lines (with
//! the salted device hash), so the capture is known to see them.
//!
//! Its own test binary, so the capture sees only this binary's runs.

use std::sync::Arc;

use koe::domain::device::DeviceId;
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{FailingStore, TestApp, issued_step_ids_with, send, spawn_app_with};
use koe_testkit::logs::{self, LogCapture};
use koe_testkit::openai::Behaviour;
use serde_json::{Value, json};

const MESSAGE: &str = "SENTINEL-MESSAGE-4a1f 明日の予定は？";
const TITLE: &str = "SENTINEL-TITLE-9c2e 歯医者";
/// Event times with distinctive seconds: a leak of either shows as `13:47:21` or `14:52:43`.
const START: &str = "2035-07-19T13:47:21+09:00";
const END: &str = "2035-07-19T14:52:43+09:00";
/// Plan ranges with distinctive seconds too.
const PLAN_FROM: &str = "2035-07-19T05:43:17+09:00";
const PLAN_TO: &str = "2035-07-20T06:31:29+09:00";
const REPLY: &str = "SENTINEL-REPLY-77b0 あしたは歯医者だね";
const DEVICE: &str = "SENTINEL-DEVICE-3e8d";
const API_KEY: &str = "SENTINEL-APIKEY-b61c";
const WRONG_KEY: &str = "SENTINEL-WRONGKEY-0f4a";
const OPENAI_KEY: &str = "sk-SENTINEL-OPENAI-58d2";
const SALT: &str = "test-salt";

/// 2035-07-18 09:00 in Tokyo.
const NOW: &str = "2035-07-18T00:00:00Z";

fn forbidden() -> Vec<&'static str> {
    vec![
        "SENTINEL-MESSAGE",
        "MESSAGE-4a1f",
        "明日の予定",
        "SENTINEL-TITLE",
        "TITLE-9c2e",
        "歯医者",
        "13:47:21",
        "14:52:43",
        "05:43:17",
        "06:31:29",
        "SENTINEL-REPLY",
        "REPLY-77b0",
        "SENTINEL-DEVICE",
        "DEVICE-3e8d",
        "SENTINEL-APIKEY",
        "APIKEY-b61c",
        "SENTINEL-WRONGKEY",
        "WRONGKEY-0f4a",
        "SENTINEL-OPENAI",
        "OPENAI-58d2",
        "SENTINEL-EMOTION",
        "SENTINEL-TZ",
    ]
}

fn hash(device: &str) -> String {
    DeviceId::parse("deviceId", device).unwrap().log_hash(SALT)
}

fn vars() -> Vec<(&'static str, &'static str)> {
    vec![
        ("AGENT_API_KEYS", API_KEY),
        ("DEVICE_HASH_SALT", SALT),
        ("OPENAI_API_KEY", OPENAI_KEY),
        ("AGENT_DAILY_LIMIT", "4"),
    ]
}

fn round_1(device: &str) -> Value {
    json!({"message": MESSAGE, "capabilities": ["calendar"], "deviceId": device,
        "timezone": "Asia/Tokyo"})
}

/// A round 2 with the step id of a fresh plan, as round 1 issues it at [`NOW`].
fn round_2(device: &str, title: Value, start: &str) -> Value {
    let step_id = issued_step_ids_with(SALT, device, 1, NOW.parse().unwrap()).remove(0);
    json!({"message": MESSAGE, "deviceId": device, "results": [{"stepId": step_id, "tool": "calendar",
        "output": {"events": [{"title": title, "start": start, "end": END, "allDay": false}]}}]})
}

fn plan() -> Behaviour {
    Behaviour::complete(
        json!({"decision": {"type": "plan", "steps": [
            {"tool": "calendar", "args": {"from": PLAN_FROM, "to": PLAN_TO}}]}})
        .to_string(),
    )
}

fn planner_answer(emotion: &str) -> Behaviour {
    Behaviour::complete(
        json!({"decision": {"type": "answer", "reply": REPLY, "emotion": emotion}}).to_string(),
    )
}

fn responder_answer(emotion: &str) -> Behaviour {
    Behaviour::complete(json!({"reply": REPLY, "emotion": emotion}).to_string())
}

/// Posts with `key` and asserts the status; answers never echo a key or the user's data.
async fn expect(app: &TestApp, key: &str, body: Value, status: u16) -> String {
    let response = send(
        app.agent_with_key(http::Method::POST, "/agent", key)
            .body(body.to_string()),
    )
    .await;
    let got = response.status().as_u16();
    let text = response.text().await.unwrap();
    assert_eq!(got, status, "{text}");
    if status != 200 {
        for sentinel in forbidden() {
            assert!(!text.contains(sentinel), "{sentinel} echoed: {text}");
        }
    }
    text
}

/// Every path of both rounds, with the sentinels in play.
async fn exercise(app: &TestApp, device: &str) {
    // Wrong key, with the user's data in the body.
    expect(app, WRONG_KEY, round_1(device), 401).await;

    // Round 1: a plan, a direct answer after a refused output, then invalid output twice.
    app.openai.script([plan()]);
    let text = expect(app, API_KEY, round_1(device), 200).await;
    assert!(text.contains(PLAN_FROM), "{text}");
    app.openai
        .script([planner_answer("SENTINEL-EMOTION"), planner_answer("happy")]);
    expect(app, API_KEY, round_1(device), 200).await;
    app.openai.script([
        planner_answer("SENTINEL-EMOTION"),
        Behaviour::complete(REPLY),
    ]);
    expect(app, API_KEY, round_1(device), 500).await;

    // Round 2: an answer, invalid output then valid, a provider failure.
    app.openai.script([responder_answer("neutral")]);
    let text = expect(app, API_KEY, round_2(device, json!(TITLE), START), 200).await;
    assert!(text.contains("SENTINEL-REPLY"), "{text}");
    app.openai.script([
        responder_answer("SENTINEL-EMOTION"),
        responder_answer("shy"),
    ]);
    expect(app, API_KEY, round_2(device, json!(TITLE), START), 200).await;
    app.openai
        .script([Behaviour::server_error(), Behaviour::server_error()]);
    expect(app, API_KEY, round_2(device, json!(TITLE), START), 500).await;

    // Validation errors carrying the sentinels in the offending values.
    let long_title = format!("{TITLE}{}", "x".repeat(200));
    expect(app, API_KEY, round_2(device, json!(long_title), START), 400).await;
    let bad_start = format!("{START} SENTINEL-TITLE");
    expect(app, API_KEY, round_2(device, json!(TITLE), &bad_start), 400).await;
    let mut bad_tz = round_1(device);
    bad_tz["timezone"] = json!("SENTINEL-TZ/歯医者");
    expect(app, API_KEY, bad_tz, 400).await;
    let mut bad_device = round_1(device);
    bad_device["deviceId"] = json!(format!("{device} 歯医者"));
    expect(app, API_KEY, bad_device, 400).await;
    let mut long_message = round_1(device);
    long_message["message"] = json!(MESSAGE.repeat(200));
    expect(app, API_KEY, long_message, 400).await;

    // The fourth counted round 1 (a plan), then the limit.
    app.openai.script([plan()]);
    expect(app, API_KEY, round_1(device), 200).await;
    expect(app, API_KEY, round_1(device), 429).await;
}

fn assert_handler_lines(capture: &LogCapture, device: &str) {
    for round in [1, 2] {
        capture.assert_line(
            &format!("the answered line of round {round}"),
            &[
                ("message", json!("agent round answered")),
                ("round", json!(round)),
                ("device", json!(hash(device))),
            ],
        );
    }
    capture.assert_line(
        "the daily limit line",
        &[
            ("message", json!("agent daily limit reached")),
            ("device", json!(hash(device))),
        ],
    );
    capture.assert_line(
        "the refused output line",
        &[("message", json!("model output refused"))],
    );
    capture.assert_refusal_logged("/agent", 429, "DAILY_LIMIT_EXCEEDED");
    capture.assert_refusal_logged("/agent", 500, "PROVIDER_BAD_RESPONSE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_rounds_log_no_messages_calendar_data_replies_device_ids_or_keys() {
    let capture = logs::capture();
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let app = spawn_app_with(&vars(), |app| app.with_clock(clock)).await;
    exercise(&app, DEVICE).await;
    assert_handler_lines(&capture, DEVICE);
    capture.assert_none_of(forbidden());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_counter_warns_with_the_device_hash_only() {
    let capture = logs::capture();
    let device = "SENTINEL-DEVICE-3e8d-failing";
    let app = spawn_app_with(&vars(), |app| app.with_store(Arc::new(FailingStore))).await;
    app.openai.script([plan()]);
    expect(&app, API_KEY, round_1(device), 200).await;
    capture.assert_line(
        "the fail-open warning",
        &[
            ("level", json!("WARN")),
            (
                "message",
                json!("agent usage counter failed: request allowed uncounted (fail-open)"),
            ),
            ("device", json!(hash(device))),
        ],
    );
    capture.assert_none_of(forbidden());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dynamodb_counter_logs_no_device_ids() {
    let capture = logs::capture();
    let app = koe_testkit::harness::spawn_app_on_dynamodb(&vars(), NOW).await;
    let device = "SENTINEL-DEVICE-3e8d-ddb";
    exercise(&app, device).await;
    assert_handler_lines(&capture, device);
    capture.assert_none_of(forbidden());
}
