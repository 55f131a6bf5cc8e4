//! Round 2: the responder answers from the plan's results in the character's style.

use koe_testkit::harness::{header, invalid_field};
use serde_json::{Value, json};

use super::{DEVICE, app, ok_body, post, responder_answer, round_2, step_id, system_and_schema};

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
