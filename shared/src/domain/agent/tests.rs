//! The agent request's and reply's tests: the two rounds, each rule, the replies' JSON, names.

use super::*;
use serde_json::json;

fn calendar() -> Capability {
    Capability::from_name("calendar").unwrap()
}

fn parse(body: serde_json::Value) -> Result<AgentRequest, String> {
    AgentRequest::parse(body.as_object().unwrap()).map_err(|e| e.to_string())
}

#[test]
fn a_body_without_results_is_round_1_with_known_capabilities_once() {
    let AgentRequest::Round1(r) = parse(json!({
        "message": "明日の予定は？",
        "capabilities": ["camera", "calendar", "calendar"],
        "deviceId": "d1",
        "results": null,
    }))
    .unwrap() else {
        panic!("round 1")
    };
    assert_eq!(r.capabilities, vec![calendar()]);
    assert_eq!(r.timezone, chrono_tz::Asia::Tokyo);
    assert_eq!(r.device_id.as_str(), "d1");
}

#[test]
fn a_body_with_results_is_round_2_and_names_its_device() {
    let AgentRequest::Round2(r) = parse(json!({
        "message": "明日の予定は？",
        "deviceId": "d2",
        "timezone": "Europe/Berlin",
        "results": [{"stepId": "s1", "tool": "calendar", "output": {"events": [
            {"title": "", "start": "2026-03-02T10:00:00+09:00", "end": "2026-03-02T11:00:00+09:00"},
            {"title": "休み", "start": "2026-03-03T00:00:00+09:00", "end": "2026-03-04T00:00:00+09:00", "allDay": true},
        ]}}],
    }))
    .unwrap() else {
        panic!("round 2")
    };
    assert_eq!(r.device_id.as_str(), "d2");
    assert_eq!(r.timezone, chrono_tz::Europe::Berlin);
    let output = &r.results[0].output;
    assert_eq!(output.tool, calendar());
    assert_eq!(output.value(0, "allDay"), Some(&json!(false)));
    assert_eq!(output.value(1, "allDay"), Some(&json!(true)));
    assert_eq!(
        serde_json::to_value(&r.results[0]).unwrap()["events"][1]["start"],
        "2026-03-03T00:00:00+09:00"
    );
}

#[test]
fn each_rule_names_its_field() {
    let event = |title: &str, start: &str| {
        json!({"message": "m", "results": [{"stepId": "s1", "tool": "calendar",
            "output": {"events": [{"title": title, "start": start, "end": "2026-03-02T11:00:00Z"}]}}]})
    };
    let cases = [
        (
            json!({"capabilities": [], "deviceId": "d"}),
            "message is required",
        ),
        (
            json!({"message": "", "capabilities": [], "deviceId": "d"}),
            "message must be 1 to 4000 characters",
        ),
        (
            json!({"message": "m", "capabilities": "calendar", "deviceId": "d"}),
            "capabilities must be an array",
        ),
        (
            json!({"message": "m", "capabilities": ["calendar", 1], "deviceId": "d"}),
            "capabilities[1] must be a string",
        ),
        (
            json!({"message": "m", "capabilities": []}),
            "deviceId is required",
        ),
        (
            json!({"message": "m", "capabilities": [], "deviceId": "d", "timezone": "JST+9"}),
            "timezone must be an IANA time zone name, e.g. Asia/Tokyo",
        ),
        (
            json!({"message": "m", "results": {}}),
            "results must be an array",
        ),
        (
            json!({"message": "m", "results": [{"tool": "calendar", "output": {"events": []}}]}),
            "results[0].stepId is required",
        ),
        (
            json!({"message": "m", "results": [{"stepId": "s1", "tool": "mail", "output": {}}]}),
            &format!("results[0].tool must be one of {}", Capability::names()),
        ),
        (
            json!({"message": "m", "results": [{"stepId": "s1", "tool": "calendar"}]}),
            "results[0].output is required",
        ),
        (
            json!({"message": "m", "results": [{"stepId": "s1", "tool": "calendar", "output": {}}]}),
            "results[0].output.events is required",
        ),
        (
            json!({"message": "m", "results": [{"stepId": "s1", "tool": "calendar", "output": {"events": []}}]}),
            "deviceId is required",
        ),
        (
            json!({"message": "m", "deviceId": null, "results": [{"stepId": "s1", "tool": "calendar", "output": {"events": []}}]}),
            "deviceId is required",
        ),
        (
            event(&"x".repeat(201), "2026-03-02T10:00:00Z"),
            "results[0].output.events[0].title must be 0 to 200 characters",
        ),
        (
            event("t", "2026-03-02 10:00"),
            "results[0].output.events[0].start must be an RFC 3339 date-time with an offset, e.g. 2026-01-02T10:00:00+09:00",
        ),
    ];
    for (body, expected) in cases {
        assert_eq!(parse(body.clone()).unwrap_err(), expected, "{body}");
    }
}

#[test]
fn replies_serialize_as_the_contract_says() {
    let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap();
    let plan = AgentReply::Plan(vec![PlanStep {
        id: "s1".into(),
        tool: calendar(),
        from: at("2026-03-02T00:00:00+09:00"),
        to: at("2026-03-03T00:00:00+09:00"),
    }]);
    assert_eq!(
        serde_json::to_value(AgentReplyView::from(&plan)).unwrap(),
        json!({"type": "plan", "steps": [{"id": "s1", "tool": "calendar",
            "args": {"from": "2026-03-02T00:00:00+09:00", "to": "2026-03-03T00:00:00+09:00"}}]})
    );
    let answer = AgentReply::Answer {
        reply: "いいね".into(),
        emotion: Emotion::Happy,
    };
    assert_eq!(
        serde_json::to_value(AgentReplyView::from(&answer)).unwrap(),
        json!({"type": "answer", "reply": "いいね", "emotion": "happy"})
    );
}

#[test]
fn names_round_trip() {
    for e in Emotion::ALL {
        assert_eq!(Emotion::from_name(e.as_str()), Some(e));
    }
    assert_eq!(Emotion::from_name("Happy"), None);
    for c in Capability::all() {
        assert_eq!(Capability::from_name(c.as_str()), Some(c));
    }
    assert_eq!(Capability::from_name("Calendar"), None);
}
