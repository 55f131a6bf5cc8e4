//! POST /agent over HTTP against the real local server, with a stand-in OpenAI on loopback and a
//! manual clock: both rounds end to end, structured output checked and retried once, every class
//! of bad input. The daily limit has its own file (`agent_limit.rs`).

use std::sync::Arc;
use std::time::Duration;

use koe::domain::agent::{
    MAX_DATETIME_CHARS, MAX_EVENTS, MAX_MESSAGE_CHARS, MAX_STEP_ID_CHARS, MAX_STEPS,
    MAX_TIMEZONE_CHARS, MAX_TITLE_CHARS,
};
use koe::domain::device::MAX_DEVICE_ID_CHARS;
use koe::routes::AGENT_BODY_LIMIT;
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{
    TestApp, error_body, header, invalid_field, issued_step_id, issued_step_ids_with, send,
    spawn_app_with,
};
use koe_testkit::openai::Behaviour;
use serde_json::{Value, json};

use super::api_chat::{assert_fits_within, padded_to};

/// The app's clock: Sunday 2026-03-01, 09:00 in Tokyo.
const NOW: &str = "2026-03-01T00:00:00Z";
const DEVICE: &str = "6F9619FF-8B86-D011-B42D-00C04FC964FF";

async fn app_with(vars: &[(&str, &str)]) -> TestApp {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    spawn_app_with(vars, |app| app.with_clock(clock)).await
}

async fn app() -> TestApp {
    app_with(&[]).await
}

async fn post(app: &TestApp, body: impl Into<reqwest::Body>) -> reqwest::Response {
    send(app.agent(http::Method::POST, "/agent").body(body)).await
}

fn round_1(message: &str) -> Value {
    json!({"message": message, "capabilities": ["calendar"], "deviceId": DEVICE})
}

fn now() -> chrono::DateTime<chrono::Utc> {
    NOW.parse().unwrap()
}

/// A step id of a fresh plan of [`DEVICE`], as round 1 issues it at [`NOW`].
fn step_id() -> String {
    issued_step_id(DEVICE, now())
}

fn round_2() -> Value {
    json!({
        "message": "明日の予定を教えて",
        "deviceId": DEVICE,
        "results": [{"stepId": step_id(), "tool": "calendar", "output": {"events": [
            {"title": "歯医者", "start": "2026-03-02T10:00:00+09:00", "end": "2026-03-02T11:00:00+09:00"},
            {"title": "実家", "start": "2026-03-02T00:00:00+09:00", "end": "2026-03-03T00:00:00+09:00", "allDay": true},
        ]}}],
    })
}

/// What the planner model writes for a one-step calendar plan over `from`..`to`.
fn plan_output(ranges: &[(&str, &str)]) -> Behaviour {
    let steps: Vec<Value> = ranges
        .iter()
        .map(|(from, to)| json!({"tool": "calendar", "args": {"from": from, "to": to}}))
        .collect();
    Behaviour::complete(json!({"decision": {"type": "plan", "steps": steps}}).to_string())
}

fn tomorrow_plan() -> Behaviour {
    plan_output(&[("2026-03-02T00:00:00+09:00", "2026-03-03T00:00:00+09:00")])
}

fn planner_answer(reply: &str, emotion: &str) -> Behaviour {
    Behaviour::agent_answer(reply, emotion)
}

fn responder_answer(reply: &str, emotion: &str) -> Behaviour {
    Behaviour::complete(json!({"reply": reply, "emotion": emotion}).to_string())
}

async fn ok_body(response: reqwest::Response) -> Value {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    body
}

/// The provider request's system prompt and its JSON schema.
fn system_and_schema(request: &Value) -> (String, Value) {
    let format = &request["response_format"];
    assert_eq!(format["type"], "json_schema", "{format}");
    assert_eq!(format["json_schema"]["strict"], true, "{format}");
    assert_eq!(request["messages"][0]["role"], "system");
    (
        request["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_owned(),
        format["json_schema"]["schema"].clone(),
    )
}

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

/// Asserts one error notification for POST /agent with `code`.
fn assert_one_notification(app: &TestApp, code: &str) {
    let published = app.events.published();
    assert_eq!(published.len(), 1, "{published:?}");
    assert_eq!(published[0].code, code);
    assert_eq!(published[0].route, "POST /agent");
    assert_eq!(published[0].function, "agent");
}

// ---------------------------------------------------------------------------------------------
// Round 1

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
    let ids: Vec<&str> = body["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
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
    error_body(
        post(&app, body.to_string()).await,
        500,
        "PROVIDER_BAD_RESPONSE",
    )
    .await;
    assert_eq!(app.openai.request_count(), 2);
    assert_one_notification(&app, "PROVIDER_BAD_RESPONSE");
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

// ---------------------------------------------------------------------------------------------
// Round 2

#[tokio::test]
async fn round_2_answers_from_the_results_in_the_characters_style() {
    let app = app().await;
    app.openai.script([responder_answer(
        "あしたは朝10時に歯医者さんだね。",
        "neutral",
    )]);
    let response = post(&app, round_2().to_string()).await;
    assert_eq!(
        header(&response, "x-ratelimit-limit").as_deref(),
        Some("50")
    );
    assert_eq!(
        header(&response, "x-ratelimit-remaining"),
        None,
        "round 2 does not read the counter"
    );
    assert_eq!(
        ok_body(response).await,
        json!({"type": "answer", "reply": "あしたは朝10時に歯医者さんだね。", "emotion": "neutral"})
    );

    let received = app.openai.received();
    assert_eq!(received.len(), 1, "one responder call");
    let request = &received[0].body;
    assert_eq!(request["model"], "gpt-4o-mini");
    let (system, schema) = system_and_schema(request);
    assert!(system.starts_with("あなたは「こえ」"), "{system}");
    assert!(system.contains("2026-03-01T09:00:00+09:00"), "{system}");
    assert_eq!(
        schema["required"],
        json!(["reply", "emotion"]),
        "the responder schema: {schema}"
    );
    assert_eq!(
        schema["properties"]["emotion"]["enum"],
        json!(["neutral", "happy", "sad", "angry", "surprised", "shy"])
    );
    let messages = request["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": "明日の予定を教えて"})
    );
    let data = messages[2]["content"].as_str().unwrap();
    assert_eq!(messages[2]["role"], "user");
    let json_part = data.split_once('\n').unwrap().1;
    assert_eq!(
        serde_json::from_str::<Value>(json_part).unwrap(),
        json!([{"stepId": "s1", "tool": "calendar", "events": [
            {"title": "歯医者", "start": "2026-03-02T10:00:00+09:00", "end": "2026-03-02T11:00:00+09:00", "allDay": false},
            {"title": "実家", "start": "2026-03-02T00:00:00+09:00", "end": "2026-03-03T00:00:00+09:00", "allDay": true},
        ]}]),
        "{data}"
    );
}

#[tokio::test]
async fn round_2_names_its_device_and_needs_a_plans_results() {
    let app = app().await;
    let results = json!([{"stepId": step_id(), "tool": "calendar", "output": {"events": []}}]);
    // Without its device, a plan's ids would be answered for anyone holding the API key.
    for device in [None, Some(Value::Null)] {
        let mut body = json!({"message": "予定ある？", "results": results});
        if let Some(device) = device {
            body["deviceId"] = device;
        }
        let error = invalid_field(post(&app, body.to_string()).await, "deviceId").await;
        assert_eq!(error["message"], "deviceId is required", "{error}");
    }
    assert_eq!(app.openai.request_count(), 0, "no model call");
    app.openai
        .script([responder_answer("何も入ってないよ。", "neutral")]);
    let body = json!({"message": "予定ある？", "deviceId": DEVICE, "results": results});
    ok_body(post(&app, body.to_string()).await).await;
    // No results carry no step id, so nothing binds them to a round 1.
    let body = json!({"message": "予定ある？", "deviceId": DEVICE, "results": []});
    invalid_field(post(&app, body.to_string()).await, "results").await;
    assert_eq!(app.openai.request_count(), 1);
}

#[tokio::test]
async fn round_2_takes_200_events_and_200_character_titles() {
    let app = app().await;
    app.openai
        .script([responder_answer("たくさんあるね！", "surprised")]);
    let events: Vec<Value> = (0..200)
        .map(|i| {
            json!({"title": format!("e{i}"), "start": "2026-03-02T10:00:00Z",
                "end": "2026-03-02T11:00:00Z"})
        })
        .collect();
    let mut last = events;
    last[199]["title"] = json!("あ".repeat(200));
    let body = json!({"message": "m", "deviceId": DEVICE, "results": [
        {"stepId": step_id(), "tool": "calendar", "output": {"events": last}}]});
    ok_body(post(&app, body.to_string()).await).await;
}

// ---------------------------------------------------------------------------------------------
// Round 2 bound to round 1: only step ids round 1 issued, a bounded number of times

/// An app on a clock the test moves, and the clock.
async fn app_and_clock() -> (TestApp, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let app = spawn_app_with(&[], {
        let clock = clock.clone();
        |app| app.with_clock(clock)
    })
    .await;
    (app, clock)
}

/// Runs a round 1 that plans one calendar step and returns the plan's step ids.
async fn planned_ids(app: &TestApp) -> Vec<String> {
    app.openai.script([tomorrow_plan()]);
    let body = ok_body(post(app, round_1("明日の予定は？").to_string()).await).await;
    body["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

fn round_2_for(ids: &[&str]) -> Value {
    let results: Vec<Value> = ids
        .iter()
        .map(|id| json!({"stepId": id, "tool": "calendar", "output": {"events": []}}))
        .collect();
    json!({"message": "明日の予定は？", "deviceId": DEVICE, "results": results})
}

/// Asserts a 400 naming `field` whose message contains `words`, and that no model was called
/// for it.
async fn refused(app: &TestApp, body: Value, field: &str, words: &str) {
    let calls = app.openai.request_count();
    let body = invalid_field(post(app, body.to_string()).await, field).await;
    let message = body["message"].as_str().unwrap();
    assert!(message.contains(words), "{message}");
    assert_eq!(
        app.openai.request_count(),
        calls,
        "no model call: {message}"
    );
}

#[tokio::test]
async fn round_1_then_round_2_works_as_before_for_the_app() {
    let (app, _) = app_and_clock().await;
    let ids = planned_ids(&app).await;
    assert_eq!(ids.len(), 1);
    app.openai
        .script([responder_answer("あしたは何もないよ。", "neutral")]);
    let body = ok_body(post(&app, round_2_for(&[&ids[0]]).to_string()).await).await;
    assert_eq!(body["reply"], "あしたは何もないよ。");
    assert_eq!(app.openai.request_count(), 2, "planner, then responder");
    // The responder sees the step's number, not its signature.
    let data = app.openai.received()[1].body["messages"][2]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(data.contains(r#""stepId":"s1""#), "{data}");
    assert!(!data.contains(&ids[0]), "{data}");
    assert!(app.events.published().is_empty());
}

#[tokio::test]
async fn made_up_step_ids_are_400_and_call_no_model() {
    let (app, _) = app_and_clock().await;
    for made_up in [
        "s1".to_owned(),
        "step-1".to_owned(),
        format!("s1.{}", "A".repeat(60)),
        "s1.AAAAAAAAAAAAAA.000000000000.9999999999.AAAAAAAAAAAAAAAAAAAAAA".to_owned(),
    ] {
        refused(
            &app,
            round_2_for(&[&made_up]),
            "results[0].stepId",
            "was not issued by round 1",
        )
        .await;
    }
    // Signed with another key: not ours either.
    let foreign = {
        let other = spawn_app_with(
            &[("AGENT_STEP_KEY", "another-stack-key-0123456789abcdef")],
            {
                let clock = Arc::new(ManualClock::at_rfc3339(NOW));
                |app| app.with_clock(clock)
            },
        )
        .await;
        planned_ids(&other).await.remove(0)
    };
    refused(
        &app,
        round_2_for(&[&foreign]),
        "results[0].stepId",
        "was not issued",
    )
    .await;
    assert_eq!(app.openai.request_count(), 0);
}

#[tokio::test]
async fn altered_step_ids_are_400_and_call_no_model() {
    let (app, _) = app_and_clock().await;
    let id = planned_ids(&app).await.remove(0);
    // Every part: the step number, plan id, device hash, expiry and signature.
    for position in [1, 5, 20, 30, 40, 63] {
        let mut altered = id.clone().into_bytes();
        altered[position] = if altered[position] == b'7' {
            b'8'
        } else {
            b'7'
        };
        let altered = String::from_utf8(altered).unwrap();
        refused(
            &app,
            round_2_for(&[&altered]),
            "results[0].stepId",
            "was not issued",
        )
        .await;
    }
    // A step the plan does not have, and the same step twice.
    refused(
        &app,
        round_2_for(&[&id, &id]),
        "results[1].stepId",
        "another plan",
    )
    .await;
    assert_eq!(app.openai.request_count(), 1, "only the planner");
}

#[tokio::test]
async fn another_devices_step_ids_are_refused_as_forged_ones_are() {
    let (app, clock) = app_and_clock().await;
    let id = planned_ids(&app).await.remove(0);
    let answer = |body: Value| {
        let app = &app;
        async move {
            let calls = app.openai.request_count();
            let body = invalid_field(post(app, body.to_string()).await, "results[0].stepId").await;
            assert_eq!(app.openai.request_count(), calls, "no model call");
            body
        }
    };
    let mut forged = id.clone().into_bytes();
    forged[63] = if forged[63] == b'A' { b'B' } else { b'A' };
    let forged = answer(round_2_for(&[&String::from_utf8(forged).unwrap()])).await;
    let other_device = with(round_2_for(&[&id]), "deviceId", json!("another-device"));
    assert_eq!(answer(other_device.clone()).await, forged);
    assert!(
        forged["message"]
            .as_str()
            .unwrap()
            .contains("was not issued by round 1 for this deviceId"),
        "{forged}"
    );
    // Expired too: the answer does not tell that the id is genuine for some other device.
    clock.advance(chrono::Duration::minutes(10));
    assert_eq!(answer(other_device).await, forged);
    assert_eq!(app.openai.request_count(), 1, "only the planner");
}

#[tokio::test]
async fn expired_step_ids_are_400_and_call_no_model() {
    let (app, clock) = app_and_clock().await;
    let id = planned_ids(&app).await.remove(0);
    clock.advance(chrono::Duration::minutes(10));
    refused(
        &app,
        round_2_for(&[&id]),
        "results[0].stepId",
        "has expired",
    )
    .await;
    assert_eq!(app.openai.request_count(), 1, "only the planner");
}

#[tokio::test]
async fn a_plan_is_answered_at_most_three_times() {
    let (app, _) = app_and_clock().await;
    let id = planned_ids(&app).await.remove(0);
    for _ in 0..3 {
        app.openai.script([responder_answer("またね", "happy")]);
        ok_body(post(&app, round_2_for(&[&id]).to_string()).await).await;
    }
    refused(
        &app,
        round_2_for(&[&id]),
        "results[0].stepId",
        "already answered 3 times",
    )
    .await;
    assert_eq!(app.openai.request_count(), 4, "planner + three responders");
    // A new round 1 (counted) gives a new plan.
    let fresh = planned_ids(&app).await.remove(0);
    app.openai.script([responder_answer("またね", "happy")]);
    ok_body(post(&app, round_2_for(&[&fresh]).to_string()).await).await;
}

// ---------------------------------------------------------------------------------------------
// Model output checked, retried once

#[tokio::test]
async fn planner_output_invalid_then_valid_is_200_after_one_retry() {
    let app = app().await;
    app.openai
        .script([Behaviour::complete("明日は晴れだよ"), tomorrow_plan()]);
    let response = post(&app, round_1("明日の予定").to_string()).await;
    assert_eq!(
        header(&response, "x-ratelimit-remaining").as_deref(),
        Some("49"),
        "counted once"
    );
    assert_eq!(ok_body(response).await["type"], "plan");
    let received = app.openai.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].body, received[1].body, "the same request again");
    assert!(app.events.published().is_empty());
}

#[tokio::test]
async fn planner_output_invalid_twice_is_500_provider_bad_response() {
    let app = app().await;
    app.openai.script([
        // Six steps, then a backwards range: each breaks a rule the schema cannot carry.
        plan_output(&[("2026-03-02T00:00:00+09:00", "2026-03-03T00:00:00+09:00"); 6]),
        plan_output(&[("2026-03-03T00:00:00+09:00", "2026-03-02T00:00:00+09:00")]),
        tomorrow_plan(),
    ]);
    let response = post(&app, round_1("明日の予定").to_string()).await;
    let body = error_body(response, 500, "PROVIDER_BAD_RESPONSE").await;
    assert!(
        !body["message"].as_str().unwrap().contains("明日"),
        "{body}"
    );
    assert_eq!(app.openai.request_count(), 2, "asked once more, not twice");
    assert_one_notification(&app, "PROVIDER_BAD_RESPONSE");
}

#[tokio::test]
async fn responder_output_invalid_then_valid_is_200_after_one_retry() {
    let app = app().await;
    app.openai.script([
        responder_answer("やったね", "excited"),
        responder_answer("やったね", "happy"),
    ]);
    let body = ok_body(post(&app, round_2().to_string()).await).await;
    assert_eq!(body["emotion"], "happy");
    assert_eq!(app.openai.request_count(), 2);
}

#[tokio::test]
async fn responder_output_invalid_twice_is_500_provider_bad_response() {
    let app = app().await;
    app.openai.script([
        responder_answer("   ", "happy"),
        Behaviour::refusal(),
        responder_answer("x", "happy"),
    ]);
    error_body(
        post(&app, round_2().to_string()).await,
        500,
        "PROVIDER_BAD_RESPONSE",
    )
    .await;
    assert_eq!(app.openai.request_count(), 2);
    assert_one_notification(&app, "PROVIDER_BAD_RESPONSE");
}

#[tokio::test]
async fn a_refusal_counts_as_invalid_output_and_is_asked_again() {
    let app = app().await;
    app.openai.script([
        Behaviour::refusal(),
        planner_answer("うん、聞いてるよ。", "neutral"),
    ]);
    let body = ok_body(post(&app, round_1("ねえ").to_string()).await).await;
    assert_eq!(body["reply"], "うん、聞いてるよ。");
    assert_eq!(app.openai.request_count(), 2);
}

#[tokio::test]
async fn a_provider_failure_is_its_own_code_and_the_round_still_counts() {
    let app = app().await;
    app.openai
        .script([Behaviour::server_error(), Behaviour::server_error()]);
    error_body(
        post(&app, round_1("明日").to_string()).await,
        500,
        "PROVIDER_ERROR",
    )
    .await;
    assert_eq!(
        app.openai.request_count(),
        2,
        "the adapter's one retry, no output retry"
    );
    assert_one_notification(&app, "PROVIDER_ERROR");

    app.openai.script([tomorrow_plan()]);
    let response = post(&app, round_1("明日").to_string()).await;
    assert_eq!(
        header(&response, "x-ratelimit-remaining").as_deref(),
        Some("48"),
        "the failed round was counted"
    );
}

#[tokio::test]
async fn both_attempts_share_one_time_budget() {
    let app = app_with(&[("PROVIDER_TIMEOUT_MS", "1000")]).await;
    app.openai.script([
        Behaviour::complete("not json").delayed(Duration::from_millis(700)),
        tomorrow_plan().delayed(Duration::from_millis(700)),
    ]);
    error_body(
        post(&app, round_1("明日").to_string()).await,
        500,
        "PROVIDER_TIMEOUT",
    )
    .await;
    assert_one_notification(&app, "PROVIDER_TIMEOUT");
}

#[tokio::test]
async fn without_a_provider_key_both_rounds_are_500_provider_not_configured() {
    let app = app_with(&[("OPENAI_API_KEY", "")]).await;
    for body in [round_1("m"), round_2()] {
        error_body(
            post(&app, body.to_string()).await,
            500,
            "PROVIDER_NOT_CONFIGURED",
        )
        .await;
    }
    assert_eq!(app.openai.request_count(), 0);
}

// ---------------------------------------------------------------------------------------------
// Validation

fn with(mut body: Value, field: &str, value: Value) -> Value {
    body[field] = value;
    body
}

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
            "results[0].tool must be one of calendar".into(),
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

/// The largest round 2 the field caps allow, written the most expensive way the cap counts:
/// every string character a 6-byte `\\u00XX` escape, 5 results of 200 events with the longest
/// date-times, the longest device id and time zone, compact.
fn largest_round_2() -> String {
    let esc = |n: usize| "\\u0041".repeat(n);
    let escaped = |s: &str| {
        s.chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect::<String>()
    };
    let raw_at = "2026-03-02T10:00:00.123456789+09:00";
    assert_eq!(raw_at.len(), MAX_DATETIME_CHARS);
    let at = escaped(raw_at);
    let event = format!(
        r#"{{"title":"{}","start":"{at}","end":"{at}","allDay":false}}"#,
        esc(MAX_TITLE_CHARS)
    );
    let events = vec![event; MAX_EVENTS].join(",");
    // Issued step ids are exactly MAX_STEP_ID_CHARS long.
    let device = "d".repeat(MAX_DEVICE_ID_CHARS);
    let results = issued_step_ids_with("koe", &device, MAX_STEPS, now())
        .iter()
        .map(|id| {
            assert_eq!(id.len(), MAX_STEP_ID_CHARS);
            format!(
                r#"{{"stepId":"{}","tool":"calendar","output":{{"events":[{events}]}}}}"#,
                escaped(id)
            )
        })
        .collect::<Vec<_>>()
        .join(",");
    let raw_zone = "America/Argentina/ComodRivadavia";
    assert_eq!(raw_zone.len(), MAX_TIMEZONE_CHARS);
    let zone = escaped(raw_zone);
    format!(
        r#"{{"message":"{}","results":[{results}],"deviceId":"{}","timezone":"{zone}"}}"#,
        esc(MAX_MESSAGE_CHARS),
        escaped(&device)
    )
}

#[tokio::test]
async fn the_largest_round_2_the_field_caps_allow_fits_the_cap_and_one_byte_more_does_not() {
    let app = app().await;
    let largest = largest_round_2();
    // The slack (1024) and a comma after every event and result: 5 + 1 more than JSON has.
    assert_fits_within(&largest, AGENT_BODY_LIMIT, 1024 + 6);
    app.openai.script([
        responder_answer("はい", "neutral"),
        responder_answer("はい", "neutral"),
    ]);
    ok_body(post(&app, largest.clone()).await).await;
    ok_body(post(&app, padded_to(&largest, AGENT_BODY_LIMIT)).await).await;
    let body = error_body(
        post(&app, padded_to(&largest, AGENT_BODY_LIMIT + 1)).await,
        400,
        "INVALID_REQUEST",
    )
    .await;
    assert_eq!(
        body["message"],
        format!("body must be at most {AGENT_BODY_LIMIT} bytes")
    );
    assert_eq!(app.openai.request_count(), 2);
}

#[tokio::test]
async fn a_date_time_longer_than_35_characters_is_400() {
    let app = app().await;
    let mut body = round_2();
    body["results"][0]["output"]["events"][0]["start"] =
        json!("2026-03-02T10:00:00.1234567890+09:00");
    let body = error_body(post(&app, body.to_string()).await, 400, "INVALID_REQUEST").await;
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("results[0].output.events[0].start must be an RFC 3339 date-time"),
        "{body}"
    );
}
