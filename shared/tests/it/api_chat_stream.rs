//! POST /api/chat streamed (`Accept: text/event-stream`), over the front `KOE_TEST_FRONT` names:
//! koe-local, or the `chat-stream` function behind a stand-in function URL through lambda_http's
//! response streaming (`koe_testkit::function_url`). The stand-in OpenAI writes at a set pace.

use std::time::{Duration, Instant};

use koe_testkit::harness::{TestApp, error_body, error_message, spawn_app};
use koe_testkit::openai::{Behaviour, Pace, tokens};
use serde_json::{Value, json};

const THREE_SENTENCES: &str = "Good morning! The weather in Tokyo is sunny today. \
    Would you like me to set an alarm for your call?";

/// 300 ms to the first token, then 30 tokens a second (gpt-4o-mini's order of magnitude).
const PACE: Pace = Pace {
    first_token: Duration::from_millis(300),
    tokens_per_second: 30.0,
};

fn one_message() -> String {
    json!({"messages": [{"role": "user", "content": "Hello?"}]}).to_string()
}

/// One server-sent event and when it arrived (since the request was sent).
#[derive(Debug)]
struct Event {
    name: String,
    data: Value,
    at: Duration,
}

/// Reads a streamed answer event by event, noting each event's arrival.
async fn read_events(mut response: reqwest::Response, sent: Instant) -> Vec<Event> {
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert!(response.headers().contains_key("x-request-id"));
    let mut events = Vec::new();
    let mut pending = String::new();
    while let Some(chunk) = response.chunk().await.expect("the stream reads to its end") {
        pending.push_str(std::str::from_utf8(&chunk).expect("events are UTF-8"));
        while let Some(end) = pending.find("\n\n") {
            let block: String = pending.drain(..end + 2).collect();
            let mut name = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str(d).expect("data is JSON"));
                }
            }
            events.push(Event {
                name: name.expect("every event is named"),
                data: data.expect("every event has data"),
                at: sent.elapsed(),
            });
        }
    }
    assert!(
        pending.is_empty(),
        "no partial event at the end: {pending:?}"
    );
    events
}

async fn stream(app: &TestApp, body: String) -> Vec<Event> {
    let sent = Instant::now();
    read_events(app.post_chat_stream(body).await, sent).await
}

fn named<'a>(events: &'a [Event], name: &str) -> Vec<&'a Event> {
    events.iter().filter(|e| e.name == name).collect()
}

/// The texts of the `sentence` events, in order.
fn sentences(events: &[Event]) -> Vec<&str> {
    let sentences = named(events, "sentence");
    sentences
        .iter()
        .map(|e| e.data["text"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn the_first_sentence_arrives_while_the_model_is_still_writing() {
    let app = spawn_app(&[]).await;
    app.openai
        .script([Behaviour::streamed(THREE_SENTENCES, PACE)]);
    let events = stream(&app, one_message()).await;

    assert_eq!(
        sentences(&events),
        [
            "Good morning!",
            "The weather in Tokyo is sunny today.",
            "Would you like me to set an alarm for your call?"
        ]
    );
    let first_sentence = named(&events, "sentence")[0];
    assert_eq!(first_sentence.data["index"], 0);
    let done = events.last().unwrap();
    assert_eq!(done.name, "done");
    let writing = PACE.duration(tokens(THREE_SENTENCES).len());
    assert!(
        done.at >= writing,
        "done after the model's {writing:?}: {:?}",
        done.at
    );
    assert!(first_sentence.at >= PACE.first_token);
    // The model writes for about a second after its first token; the first sentence (3 tokens)
    // is out long before the last of ~25 tokens.
    assert!(
        first_sentence.at + Duration::from_millis(500) < done.at,
        "first sentence at {:?}, model done at {:?}",
        first_sentence.at,
        done.at
    );
    let text: String = named(&events, "delta")
        .iter()
        .map(|e| e.data["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, THREE_SENTENCES);
    assert_eq!(done.data["message"]["content"], THREE_SENTENCES);

    let asked = &app.openai.received()[0].body;
    assert_eq!(asked["stream"], true);
    assert_eq!(asked["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn the_done_event_is_the_json_answer_for_the_same_model_output() {
    let app = spawn_app(&[]).await;
    let reply = "こんにちは。今日は「晴れ」です！\nお出かけですか？";
    let model_output = Behaviour::Complete {
        content: reply.into(),
        prompt_tokens: 31,
        completion_tokens: 12,
    };
    app.openai.script([model_output.clone(), model_output]);
    let json_answer = app.post_chat(one_message()).await;
    assert_eq!(json_answer.status().as_u16(), 200);
    let json_answer: Value = json_answer.json().await.unwrap();
    let events = stream(&app, one_message()).await;

    let done = named(&events, "done");
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].data, json_answer);
    assert_eq!(
        json_answer,
        json!({"message": {"role": "assistant", "content": reply}, "tokensUsed": 43,
            "usage": {"promptTokens": 31, "completionTokens": 12, "totalTokens": 43}})
    );
    assert_eq!(
        sentences(&events),
        ["こんにちは。", "今日は「晴れ」です！", "お出かけですか？"]
    );
    assert!(named(&events, "error").is_empty());
    assert!(app.events.published().is_empty());
}

#[tokio::test]
async fn a_provider_failure_mid_stream_ends_the_stream_with_an_error_event() {
    let app = spawn_app(&[]).await;
    let pace = Pace {
        first_token: Duration::from_millis(20),
        tokens_per_second: 200.0,
    };
    app.openai
        .script([Behaviour::streamed_failing(THREE_SENTENCES, pace, 8)]);
    let events = stream(&app, one_message()).await;

    let last = events.last().unwrap();
    assert_eq!(last.name, "error", "{events:?}");
    assert_eq!(
        last.data,
        json!({"code": "PROVIDER_ERROR", "message": "the model provider failed",
            "error": "the model provider failed"})
    );
    assert!(named(&events, "done").is_empty());
    assert_eq!(
        named(&events, "delta").len(),
        8,
        "the tokens written before"
    );
    assert_eq!(named(&events, "sentence").len(), 1, "Good morning!");
    // As for a 500 on the JSON path: one notification, and no retry once the answer started.
    let published = app.events.published();
    assert_eq!(published.len(), 1, "{published:?}");
    assert_eq!(published[0].code, "PROVIDER_ERROR");
    assert_eq!(published[0].route, "POST /api/chat");
    assert_eq!(published[0].status, 500);
    assert_eq!(app.openai.request_count(), 1);
}

#[tokio::test]
async fn failures_before_the_first_event_are_todays_status_and_error_body() {
    let app = spawn_app(&[]).await;
    let invalid = json!({"messages": [{"role": "robot", "content": "hi"}]}).to_string();
    let response = app.post_chat_stream(invalid).await;
    error_body(response, 400, "INVALID_REQUEST").await;
    assert_eq!(app.openai.request_count(), 0);

    app.openai
        .script([Behaviour::server_error(), Behaviour::server_error()]);
    let response = app.post_chat_stream(one_message()).await;
    error_body(response, 500, "PROVIDER_ERROR").await;
    assert_eq!(
        app.openai.request_count(),
        2,
        "retried once, as the JSON path"
    );

    app.openai.script([Behaviour::insufficient_quota()]);
    let response = app.post_chat_stream(one_message()).await;
    error_body(response, 500, "INSUFFICIENT_CREDITS").await;

    // The stream breaks off before its first token: still an ordinary error answer.
    app.openai
        .script([Behaviour::streamed_failing("Hello.", Pace::INSTANT, 0)]);
    let response = app.post_chat_stream(one_message()).await;
    error_body(response, 500, "PROVIDER_ERROR").await;

    let codes: Vec<&str> = app.events.published().iter().map(|n| n.code).collect();
    assert_eq!(
        codes,
        ["PROVIDER_ERROR", "INSUFFICIENT_CREDITS", "PROVIDER_ERROR"]
    );
}

#[tokio::test]
async fn without_a_provider_key_the_stream_is_refused_like_the_json_answer() {
    let app = spawn_app(&[("OPENAI_API_KEY", "")]).await;
    let response = app.post_chat_stream(one_message()).await;
    error_body(response, 500, "PROVIDER_NOT_CONFIGURED").await;
}

#[tokio::test]
async fn the_stream_url_answers_json_to_a_request_that_does_not_ask_for_events() {
    let app = spawn_app(&[]).await;
    app.openai.script([Behaviour::complete("Hi.")]);
    let response = app
        .client
        .post(format!("{}/api/chat", app.chat_stream_url))
        .header("accept", "application/json")
        .body(one_message())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["message"]["content"], "Hi.");
    assert_eq!(app.openai.received()[0].body.get("stream"), None);
}

#[tokio::test]
async fn the_body_cap_applies_to_the_stream_too() {
    let app = spawn_app(&[]).await;
    let over = format!(
        r#"{{"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "a".repeat(koe::chat::api::CHAT_BODY_LIMIT)
    );
    let response = app.post_chat_stream(over).await;
    let message = error_message(response, 400, "INVALID_REQUEST").await;
    assert!(message.starts_with("body must be at most"), "{message}");
    assert_eq!(app.openai.request_count(), 0);
}
