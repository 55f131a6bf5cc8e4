//! Round 1: the planner plans calendar steps or answers directly, per capability and configuration.

use koe::domain::agent::MAX_STEP_ID_CHARS;
use koe_testkit::harness::{header, strings_of};
use serde_json::{Value, json};

use super::{
    DEVICE, app, app_with, assert_bad_output_twice, ok_body, plan_output, planner_answer, post,
    responder_answer, round_1, round_2, system_and_schema, tomorrow_plan,
};

fn schema_tools(schema: &Value) -> Vec<Value> {
    schema["properties"]["decision"]["anyOf"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| {
            b["properties"]["steps"]["items"]["properties"]["tool"]["enum"]
                .as_array()
                .cloned()
        })
        .flatten()
        .collect()
}

#[tokio::test]
async fn round_1_plans_a_calendar_step_with_the_limit_headers() {
    let app = app().await;
    app.openai.script([tomorrow_plan()]);
    let response = post(&app, round_1("明日の予定を教えて").to_string()).await;
    assert_eq!(
        header(&response, "x-ratelimit-limit").as_deref(),
        Some("50")
    );
    assert_eq!(
        header(&response, "x-ratelimit-remaining").as_deref(),
        Some("49")
    );
    let mut body = ok_body(response).await;
    let id = body["steps"][0]["id"].take();
    assert!(id.as_str().unwrap().starts_with("s1."), "a signed id: {id}");
    assert_eq!(
        body,
        json!({"type": "plan", "steps": [{"id": null, "tool": "calendar",
            "args": {"from": "2026-03-02T00:00:00+09:00", "to": "2026-03-03T00:00:00+09:00"}}]})
    );

    let received = app.openai.received();
    assert_eq!(received.len(), 1, "one planner call");
    let request = &received[0].body;
    assert_eq!(
        received[0].authorization.as_deref(),
        Some("Bearer sk-test-key")
    );
    assert_eq!(request["model"], "gpt-4o-mini");
    let (system, schema) = system_and_schema(request);
    assert!(
        system.starts_with("あなたは「こえ」"),
        "the default persona: {system}"
    );
    assert!(
        system.contains("2026-03-01T09:00:00+09:00 (Sunday), time zone Asia/Tokyo"),
        "now in the default zone: {system}"
    );
    assert!(
        !system.contains("明日の予定"),
        "the message is not in the prompt"
    );
    assert_eq!(schema_tools(&schema), vec![json!("calendar")]);
    assert_eq!(
        request["messages"][1],
        json!({"role": "user", "content": "明日の予定を教えて"})
    );
    assert_eq!(request["messages"].as_array().unwrap().len(), 2);
    assert!(app.events.published().is_empty());
}

#[tokio::test]
async fn round_1_plans_up_to_five_steps_numbered_in_order() {
    let app = app().await;
    let days: Vec<(String, String)> = (2..=6)
        .map(|d| {
            (
                format!("2026-03-0{d}T00:00:00+09:00"),
                format!("2026-03-0{}T00:00:00+09:00", d + 1),
            )
        })
        .collect();
    let ranges: Vec<(&str, &str)> = days.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    app.openai.script([plan_output(&ranges)]);
    let body = ok_body(post(&app, round_1("今週の予定は？").to_string()).await).await;
    let ids = strings_of(&body["steps"], "id");
    // Signed ids (see "Round 2 bound to round 1"), numbered in plan order, of one plan.
    let plan = ids[0].split('.').nth(1).unwrap();
    for (i, id) in ids.iter().enumerate() {
        assert!(id.starts_with(&format!("s{}.{plan}.", i + 1)), "{id}");
        assert_eq!(id.len(), MAX_STEP_ID_CHARS, "{id}");
    }
    assert_eq!(body["steps"][4]["args"]["to"], "2026-03-07T00:00:00+09:00");
}

#[tokio::test]
async fn round_1_answers_directly_when_no_tool_is_needed() {
    let app = app().await;
    app.openai.script([planner_answer(
        "おはよう！今日もいい日になるといいね。",
        "happy",
    )]);
    let response = post(&app, round_1("おはよう").to_string()).await;
    assert_eq!(
        header(&response, "x-ratelimit-remaining").as_deref(),
        Some("49")
    );
    assert_eq!(
        ok_body(response).await,
        json!({"type": "answer", "reply": "おはよう！今日もいい日になるといいね。", "emotion": "happy"})
    );
    assert_eq!(app.openai.request_count(), 1);
}

#[tokio::test]
async fn the_users_timezone_is_now_for_the_planner() {
    let app = app().await;
    app.openai.script([planner_answer("hi", "neutral")]);
    let mut body = round_1("what's on tomorrow?");
    body["timezone"] = json!("America/Los_Angeles");
    ok_body(post(&app, body.to_string()).await).await;
    let (system, _) = system_and_schema(&app.openai.received()[0].body);
    assert!(
        system.contains("2026-02-28T16:00:00-08:00 (Saturday), time zone America/Los_Angeles"),
        "{system}"
    );
}

#[tokio::test]
async fn unknown_capabilities_are_ignored() {
    let app = app().await;
    app.openai.script([tomorrow_plan()]);
    let body = json!({"message": "m", "capabilities": ["camera", "calendar", "calendar", "contacts"],
        "deviceId": DEVICE});
    ok_body(post(&app, body.to_string()).await).await;
    let (_, schema) = system_and_schema(&app.openai.received()[0].body);
    assert_eq!(schema_tools(&schema), vec![json!("calendar")]);
}

#[tokio::test]
async fn without_a_known_capability_the_planner_can_only_answer() {
    let app = app().await;
    app.openai
        .script([planner_answer("ごめんね、予定は見られないんだ。", "sad")]);
    let body = json!({"message": "明日の予定は？", "capabilities": ["camera"], "deviceId": DEVICE});
    let answer = ok_body(post(&app, body.to_string()).await).await;
    assert_eq!(answer["type"], "answer");
    let (system, schema) = system_and_schema(&app.openai.received()[0].body);
    assert!(schema_tools(&schema).is_empty(), "{schema}");
    let branches = schema["properties"]["decision"]["anyOf"]
        .as_array()
        .unwrap();
    assert_eq!(branches.len(), 1);
    assert!(!system.contains("- calendar:"), "{system}");
}

#[tokio::test]
async fn a_plan_naming_a_tool_the_client_did_not_list_is_refused_twice_then_500() {
    let app = app().await;
    app.openai.script([tomorrow_plan(), tomorrow_plan()]);
    let body = json!({"message": "明日の予定は？", "capabilities": [], "deviceId": DEVICE});
    assert_bad_output_twice(&app, &body).await;
}

#[tokio::test]
async fn models_and_persona_come_from_configuration() {
    let app = app_with(&[
        ("AGENT_PLANNER_MODEL", "gpt-4o"),
        ("AGENT_RESPONDER_MODEL", "gpt-4.1-mini"),
        ("AGENT_PERSONA", "You are Hal, a calm lighthouse keeper."),
    ])
    .await;
    app.openai
        .script([tomorrow_plan(), responder_answer("Busy day.", "surprised")]);
    ok_body(post(&app, round_1("tomorrow?").to_string()).await).await;
    ok_body(post(&app, round_2().to_string()).await).await;
    let received = app.openai.received();
    assert_eq!(received[0].body["model"], "gpt-4o");
    assert_eq!(received[1].body["model"], "gpt-4.1-mini");
    for r in &received {
        let (system, _) = system_and_schema(&r.body);
        assert!(
            system.starts_with("You are Hal, a calm lighthouse keeper.\n"),
            "{system}"
        );
        assert!(!system.contains("こえ"), "{system}");
    }
}
