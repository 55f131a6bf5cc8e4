//! Every class of bad input is 400 naming its field, and never echoed.

use koe::domain::agent::Capability;
use koe_testkit::harness::header;
use serde_json::{Value, json};

use super::{DEVICE, app, app_with, ok_body, planner_answer, post, round_1, round_2, with};

fn without(mut body: Value, field: &str) -> Value {
    body.as_object_mut().unwrap().remove(field);
    body
}

/// Round 2 whose first result is `result`.
fn round_2_with(result: Value) -> Value {
    json!({"message": "m", "deviceId": DEVICE, "results": [result]})
}

/// Round 2 whose first result's first event is `event`.
fn round_2_event(event: Value) -> Value {
    round_2_with(
        json!({"stepId": "s1", "tool": "calendar", "output": {"events": [
            {"title": "ok", "start": "2026-03-02T10:00:00+09:00", "end": "2026-03-02T11:00:00+09:00"},
            event,
        ]}}),
    )
}

fn event(title: Value, start: &str, end: &str) -> Value {
    json!({"title": title, "start": start, "end": end})
}

/// `(case, raw body, expected message)`; every message must name its field.
fn invalid_cases() -> Vec<(&'static str, String, String)> {
    let r1 = round_1("m");
    let good_start = "2026-03-02T10:00:00+09:00";
    let good_end = "2026-03-02T11:00:00+09:00";
    let device_rule =
        "deviceId must be 1 to 128 characters of letters, digits, '-', '_', '.' or ':'";
    let rfc = "must be an RFC 3339 date-time with an offset, e.g. 2026-01-02T10:00:00+09:00";
    let mut cases: Vec<(&str, Value, String)> = vec![
        (
            "message missing",
            without(r1.clone(), "message"),
            "message is required".into(),
        ),
        (
            "message empty",
            with(r1.clone(), "message", json!("")),
            "message must be 1 to 4000 characters".into(),
        ),
        (
            "message over 4000 characters",
            with(r1.clone(), "message", json!("あ".repeat(4001))),
            "message must be 1 to 4000 characters".into(),
        ),
        (
            "message not a string",
            with(r1.clone(), "message", json!(["hi"])),
            "message must be a string".into(),
        ),
        (
            "round 2 message over 4000",
            with(round_2(), "message", json!("x".repeat(4001))),
            "message must be 1 to 4000 characters".into(),
        ),
        (
            "capabilities missing",
            without(r1.clone(), "capabilities"),
            "capabilities is required".into(),
        ),
        (
            "capabilities not an array",
            with(r1.clone(), "capabilities", json!("calendar")),
            "capabilities must be an array".into(),
        ),
        (
            "capabilities an object",
            with(r1.clone(), "capabilities", json!({"calendar": true})),
            "capabilities must be an array".into(),
        ),
        (
            "capability not a string",
            with(r1.clone(), "capabilities", json!(["calendar", 7])),
            "capabilities[1] must be a string".into(),
        ),
        (
            "deviceId missing in round 1",
            without(r1.clone(), "deviceId"),
            "deviceId is required".into(),
        ),
        (
            "deviceId null in round 1",
            with(r1.clone(), "deviceId", Value::Null),
            "deviceId is required".into(),
        ),
        (
            "deviceId bad in round 1",
            with(r1.clone(), "deviceId", json!("has space")),
            device_rule.into(),
        ),
        (
            "deviceId too long in round 1",
            with(r1.clone(), "deviceId", json!("d".repeat(129))),
            device_rule.into(),
        ),
        (
            "deviceId not a string",
            with(r1.clone(), "deviceId", json!(42)),
            "deviceId must be a string".into(),
        ),
        (
            "deviceId missing in round 2",
            without(round_2(), "deviceId"),
            "deviceId is required".into(),
        ),
        (
            "deviceId null in round 2",
            with(round_2(), "deviceId", Value::Null),
            "deviceId is required".into(),
        ),
        (
            "deviceId bad in round 2",
            with(round_2(), "deviceId", json!("é")),
            device_rule.into(),
        ),
        (
            "timezone not IANA",
            with(r1.clone(), "timezone", json!("JST")),
            "timezone must be an IANA time zone name, e.g. Asia/Tokyo".into(),
        ),
        (
            "timezone an offset",
            with(r1.clone(), "timezone", json!("+09:00")),
            "timezone must be an IANA time zone name, e.g. Asia/Tokyo".into(),
        ),
        (
            "timezone not a string",
            with(r1.clone(), "timezone", json!(9)),
            "timezone must be a string".into(),
        ),
        (
            "timezone bad in round 2",
            with(round_2(), "timezone", json!("Mars/Olympus")),
            "timezone must be an IANA time zone name, e.g. Asia/Tokyo".into(),
        ),
        (
            "results not an array",
            json!({"message": "m", "results": "s1"}),
            "results must be an array".into(),
        ),
        (
            "results an object",
            json!({"message": "m", "results": {"stepId": "s1"}}),
            "results must be an array".into(),
        ),
        (
            "six results",
            json!({"message": "m", "results": vec![json!({"stepId": "s1", "tool": "calendar", "output": {"events": []}}); 6]}),
            "results must have at most 5 items (one per plan step)".into(),
        ),
        (
            "result not an object",
            round_2_with(json!("s1")),
            "results[0] must be an object".into(),
        ),
        (
            "result without stepId",
            round_2_with(json!({"tool": "calendar", "output": {"events": []}})),
            "results[0].stepId is required".into(),
        ),
        (
            "result with empty stepId",
            round_2_with(json!({"stepId": "", "tool": "calendar", "output": {"events": []}})),
            "results[0].stepId must be 1 to 64 characters".into(),
        ),
        (
            "result without tool",
            round_2_with(json!({"stepId": "s1", "output": {"events": []}})),
            "results[0].tool is required".into(),
        ),
        (
            "result with unknown tool",
            round_2_with(json!({"stepId": "s1", "tool": "camera", "output": {"events": []}})),
            format!("results[0].tool must be one of {}", Capability::names()),
        ),
        (
            "result without output",
            round_2_with(json!({"stepId": "s1", "tool": "calendar"})),
            "results[0].output is required".into(),
        ),
        (
            "output not an object",
            round_2_with(json!({"stepId": "s1", "tool": "calendar", "output": []})),
            "results[0].output must be an object".into(),
        ),
        (
            "output without events",
            round_2_with(json!({"stepId": "s1", "tool": "calendar", "output": {}})),
            "results[0].output.events is required".into(),
        ),
        (
            "events not an array",
            round_2_with(json!({"stepId": "s1", "tool": "calendar", "output": {"events": {}}})),
            "results[0].output.events must be an array".into(),
        ),
        (
            "201 events",
            round_2_with(
                json!({"stepId": "s1", "tool": "calendar", "output": {"events": vec![event(json!("e"), good_start, good_end); 201]}}),
            ),
            "results[0].output.events must have at most 200 items".into(),
        ),
        (
            "event not an object",
            round_2_event(json!("歯医者")),
            "results[0].output.events[1] must be an object".into(),
        ),
        (
            "event without title",
            round_2_event(json!({"start": good_start, "end": good_end})),
            "results[0].output.events[1].title is required".into(),
        ),
        (
            "title over 200 characters",
            round_2_event(event(json!("あ".repeat(201)), good_start, good_end)),
            "results[0].output.events[1].title must be 0 to 200 characters".into(),
        ),
        (
            "title not a string",
            round_2_event(event(json!(1), good_start, good_end)),
            "results[0].output.events[1].title must be a string".into(),
        ),
        (
            "event without start",
            round_2_event(json!({"title": "t", "end": good_end})),
            "results[0].output.events[1].start is required".into(),
        ),
        (
            "start a date only",
            round_2_event(event(json!("t"), "2026-03-02", good_end)),
            format!("results[0].output.events[1].start {rfc}"),
        ),
        (
            "start without offset",
            round_2_event(event(json!("t"), "2026-03-02T10:00:00", good_end)),
            format!("results[0].output.events[1].start {rfc}"),
        ),
        (
            "start as epoch seconds",
            round_2_event(json!({"title": "t", "start": 1772413200, "end": good_end})),
            "results[0].output.events[1].start must be a string".into(),
        ),
        (
            "end not RFC 3339",
            round_2_event(event(json!("t"), good_start, "tomorrow 11:00")),
            format!("results[0].output.events[1].end {rfc}"),
        ),
        (
            "allDay not a boolean",
            round_2_event(
                json!({"title": "t", "start": good_start, "end": good_end, "allDay": "yes"}),
            ),
            "results[0].output.events[1].allDay must be a boolean".into(),
        ),
    ];
    let mut raw = vec![
        (
            "malformed JSON",
            r#"{"message": "#.to_owned(),
            "body is not valid JSON".to_owned(),
        ),
        (
            "empty body",
            String::new(),
            "body is required (a JSON object)".to_owned(),
        ),
        (
            "array body",
            "[]".to_owned(),
            "body must be a JSON object".to_owned(),
        ),
    ];
    raw.extend(
        cases
            .drain(..)
            .map(|(case, body, expected)| (case, body.to_string(), expected)),
    );
    raw
}

#[tokio::test]
async fn every_class_of_bad_input_is_400_naming_its_field_and_nothing_is_counted_or_sent() {
    let app = app_with(&[("AGENT_DAILY_LIMIT", "1")]).await;
    let mut failures = Vec::new();
    for (case, body, expected) in invalid_cases() {
        let response = post(&app, body).await;
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        let message = body["message"].as_str().unwrap_or_default();
        let ok = status == 400
            && body["code"] == "INVALID_REQUEST"
            && body["error"] == body["message"]
            && message.starts_with(&expected);
        if !ok {
            failures.push(format!(
                "{case}: expected 400 {expected:?}, got {status} {body}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(app.openai.request_count(), 0, "the model was never called");
    assert!(app.events.published().is_empty());

    // The limit of 1 is untouched: a valid round 1 still gets through.
    app.openai.script([planner_answer("やあ", "happy")]);
    let response = post(&app, round_1("やあ").to_string()).await;
    assert_eq!(
        header(&response, "x-ratelimit-remaining").as_deref(),
        Some("0")
    );
    ok_body(response).await;
}

#[tokio::test]
async fn bad_input_is_never_echoed() {
    let app = app().await;
    let secret = "SECRET-CALENDAR-TITLE";
    let cases = [
        round_2_event(event(
            json!(format!("{secret}{}", "x".repeat(200))),
            "2026-03-02T10:00:00Z",
            "2026-03-02T11:00:00Z",
        )),
        round_2_event(event(
            json!("t"),
            &format!("{secret}T10:00"),
            "2026-03-02T11:00:00Z",
        )),
        with(round_1("m"), "timezone", json!(secret)),
        with(round_1("m"), "deviceId", json!(format!("{secret} x"))),
    ];
    for body in cases {
        let text = post(&app, body.to_string()).await.text().await.unwrap();
        assert!(!text.contains("SECRET"), "{text}");
    }
}
