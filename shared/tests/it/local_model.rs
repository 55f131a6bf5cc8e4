//! koe-local without OpenAI settings (issue 60): chat, JSON and streamed, and both agent rounds
//! answer from the built-in model (`koe_local::model`) through the local server, each marked as
//! its own in the text and by `X-Koe-Model`; round 1 plans a calendar step for the day asked
//! about, round 2 answers with an emotion. Behind the gateway front (a deployed function) the
//! same settings answer 500 `PROVIDER_NOT_CONFIGURED`: the built-in model is koe-local's only.
//! Starts koe-local itself, so it is not in test.sh's gateway-front pass.

use std::sync::Arc;

use koe_local::model::{HEADER, HEADER_VALUE, MARKER};
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{Front, TestApp, error_body, header, spawn_app_on};
use serde_json::{Value, json};

/// Sunday 2026-03-01, 09:00 in Tokyo.
const NOW: &str = "2026-03-01T00:00:00Z";
const DEVICE: &str = "local-model-device";
/// No OpenAI settings (the harness sets a stand-in's; empty reads as unset).
const OFFLINE: &[(&str, &str)] = &[("OPENAI_API_KEY", ""), ("OPENAI_BASE_URL", "")];

async fn offline(front: Front) -> TestApp {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    spawn_app_on(front, OFFLINE, |app| app.with_clock(clock)).await
}

/// A 200 answer marked as the built-in model's, and its JSON body.
async fn marked(response: reqwest::Response) -> Value {
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(header(&response, HEADER).as_deref(), Some(HEADER_VALUE));
    response.json().await.unwrap()
}

fn chat_body() -> String {
    json!({"messages": [{"role": "user", "content": "Hello, Koe?"}]}).to_string()
}

#[tokio::test]
async fn chat_answers_200_from_the_builtin_model_json_and_streamed() {
    let app = offline(Front::Local).await;
    let body = marked(app.post_chat(chat_body()).await).await;
    let content = body["message"]["content"].as_str().unwrap();
    assert!(content.starts_with(MARKER), "{body}");
    assert!(content.contains("Hello, Koe?"), "{body}");
    assert!(body["tokensUsed"].as_u64().unwrap() > 0, "{body}");

    let response = app.post_chat_stream(chat_body()).await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(header(&response, HEADER).as_deref(), Some(HEADER_VALUE));
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    let done = text
        .split("\n\n")
        .find_map(|event| event.strip_prefix("event: done\ndata: "))
        .unwrap_or_else(|| panic!("a done event in {text}"));
    let done: Value = serde_json::from_str(done).unwrap();
    assert_eq!(
        done["message"]["content"], content,
        "the same reply streamed"
    );
    assert!(text.contains("event: sentence"), "{text}");
    assert_eq!(app.openai.request_count(), 0, "no provider asked");
    // Other routes are not marked.
    let health = app.get("/health").await;
    assert_eq!(header(&health, HEADER), None);
}

/// Round 1 for `message` with the calendar listed: the plan's one step's range.
async fn planned(app: &TestApp, message: &str) -> (String, String, String) {
    let round_1 = json!({"message": message, "capabilities": ["calendar"], "deviceId": DEVICE});
    let body = marked(app.post_agent(&round_1).await).await;
    assert_eq!(body["type"], "plan", "{message}: {body}");
    let steps = body["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "{body}");
    assert_eq!(steps[0]["tool"], "calendar");
    let field = |name: &str| steps[0]["args"][name].as_str().unwrap().to_owned();
    let id = steps[0]["id"].as_str().unwrap().to_owned();
    (id, field("from"), field("to"))
}

#[tokio::test]
async fn round_1_plans_the_calendar_for_the_day_asked_and_round_2_answers_with_an_emotion() {
    let app = offline(Front::Local).await;
    let day = |d: u32| format!("2026-03-{d:02}T00:00:00+09:00");
    for (message, from, to) in [
        ("What's on tomorrow?", day(2), day(3)),
        ("明日の予定は？", day(2), day(3)),
        ("What's on today?", day(1), day(2)),
        // A Sunday: the rest of this week is today.
        ("What's on this week?", day(1), day(2)),
    ] {
        let (_, got_from, got_to) = planned(&app, message).await;
        assert_eq!((got_from, got_to), (from, to), "{message}");
    }

    // A message about nothing on the calendar is answered at once, marked.
    let round_1 =
        json!({"message": "How are you?", "capabilities": ["calendar"], "deviceId": DEVICE});
    let body = marked(app.post_agent(&round_1).await).await;
    assert_eq!(body["type"], "answer", "{body}");
    assert!(body["reply"].as_str().unwrap().starts_with(MARKER));

    // Round 2: the emotion follows the number of events.
    let event = |title: &str, hour: u32| {
        json!({"title": title, "start": format!("2026-03-02T{hour:02}:00:00+09:00"),
            "end": format!("2026-03-02T{:02}:00:00+09:00", hour + 1)})
    };
    for (events, emotion, says) in [
        (json!([]), "happy", "free day".to_owned()),
        (
            json!([event("歯医者", 10), event("買い物", 15)]),
            "neutral",
            "2 events: 歯医者 at 10:00, 買い物 at 15:00.".to_owned(),
        ),
        (
            json!([event("a", 8), event("b", 9), event("c", 10), event("d", 11)]),
            "surprised",
            "4 events".to_owned(),
        ),
    ] {
        let (id, _, _) = planned(&app, "What's on tomorrow?").await;
        let round_2 = json!({"message": "What's on tomorrow?", "deviceId": DEVICE,
            "results": [{"stepId": id, "tool": "calendar", "output": {"events": events}}]});
        let body = marked(app.post_agent(&round_2).await).await;
        assert_eq!(body["type"], "answer", "{body}");
        assert_eq!(body["emotion"], emotion, "{body}");
        let reply = body["reply"].as_str().unwrap();
        assert!(reply.starts_with(MARKER), "{reply}");
        assert!(reply.contains(&says), "{reply}");
    }
    assert_eq!(app.openai.request_count(), 0, "no provider asked");
}

#[tokio::test]
async fn a_base_url_switches_it_off_and_no_deployed_function_has_it() {
    // A base URL without a key: the OpenAI adapter's answer, unmarked.
    let app = spawn_app_on(Front::Local, &[("OPENAI_API_KEY", "")], |app| app).await;
    let response = app.post_chat(chat_body()).await;
    assert_eq!(header(&response, HEADER), None);
    error_body(response, 500, "PROVIDER_NOT_CONFIGURED").await;

    // Behind the gateway, as deployed: the same settings as koe-local's offline run.
    let app = offline(Front::Lambda).await;
    let response = app.post_chat(chat_body()).await;
    assert_eq!(header(&response, HEADER), None);
    error_body(response, 500, "PROVIDER_NOT_CONFIGURED").await;
    let functions =
        std::fs::read_to_string(koe_testkit::template::repo_root().join("functions/Cargo.toml"))
            .unwrap();
    assert!(
        !functions.contains("koe-local"),
        "the Lambdas do not link koe-local (nor its model)"
    );
}
