//! The spend guard over HTTP: each public API's daily model-token ceiling, counted on DynamoDB
//! Local from the usage the stand-in OpenAI reports (40 + 17 = 57 tokens per completion).
//! Every request asks for `maxTokens` 375 of one 2-character message, so each reserves exactly
//! 1 + 8 + 16 + 375 = 400 tokens before its completion (`spend_guard::token_bound`).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use koe::domain::usage_day::UsageDay;
use koe::model::ModelRequest;
use koe::model::spend_guard::token_bound;
use koe::store::SpendOutcome;
use koe::store::prelude::*;
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{TestApp, error_body, send, spawn_app_with};
use koe_testkit::openai::Behaviour;
use serde_json::{Value, json};

/// 2035, so that counters written to DynamoDB Local never lapse by the wall clock.
const NOW: &str = "2035-03-01T03:00:00Z";
const USED_PER_CALL: u64 = 57;

fn chat_body() -> Value {
    json!({"messages": [{"role": "user", "content": "hi"}], "maxTokens": 375})
}

fn chat_request(app: &TestApp) -> reqwest::RequestBuilder {
    app.client
        .post(format!("{}/api/chat", app.chat_url))
        .header("content-type", "application/json")
        .body(chat_body().to_string())
}

async fn chat(app: &TestApp) -> reqwest::Response {
    send(chat_request(app)).await
}

async fn app(store: Arc<dyn Store>, ceiling: &str) -> TestApp {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    spawn_app_with(
        &[
            ("CHAT_DAILY_TOKEN_CEILING", ceiling),
            ("AGENT_DAILY_TOKEN_CEILING", ceiling),
        ],
        |app| app.with_clock(clock).with_store(store),
    )
    .await
}

fn day() -> UsageDay {
    UsageDay::of(NOW.parse::<DateTime<Utc>>().unwrap())
}

/// The day's chat token count as the store holds it (reserving 0 reads it).
pub(super) async fn counted(store: &dyn Store, api: &str) -> u64 {
    let day = day();
    match store
        .reserve_tokens(api, &day.key, 0, u64::MAX, day.expire_at())
        .await
        .unwrap()
    {
        SpendOutcome::Reserved { total } => total,
        SpendOutcome::CeilingReached => unreachable!(),
    }
}

fn spend_notices(app: &TestApp) -> usize {
    let published = app.events.published();
    assert!(
        published.iter().all(|n| n.code == "SPEND_CEILING_REACHED"),
        "{published:?}"
    );
    published.len()
}

#[test]
fn each_test_request_reserves_400_tokens() {
    let request: koe::domain::chat::ChatRequest =
        koe::domain::chat::ChatRequest::parse(chat_body().as_object().unwrap()).unwrap();
    let model_request = ModelRequest {
        model: "gpt-4o-mini".into(),
        messages: request.messages.clone(),
        max_tokens: request.max_tokens,
        response_format: None,
    };
    assert_eq!(token_bound(&model_request), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chat_trips_exactly_at_its_ceiling_under_concurrency_on_dynamodb_and_notifies_once() {
    let store: Arc<dyn Store> = Arc::new(koe_testkit::dynamodb::fresh_store().await);
    let app = app(store.clone(), "1000").await;
    // Slow completions: every request below reserves before any is corrected to its usage.
    app.openai
        .set_default(Behaviour::complete("はい").delayed(Duration::from_millis(700)));

    // 20 at once: reservations of 400 pass while the count is below 1000 (0, 400, 800): 3.
    let tasks: Vec<_> = (0..20)
        .map(|_| tokio::spawn(send(chat_request(&app))))
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        let response = task.await.unwrap();
        let status = response.status().as_u16();
        if status == 503 {
            assert!(response.headers().contains_key("retry-after"));
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["code"], "SPEND_CEILING_REACHED", "{body}");
            assert_eq!(body["error"], body["message"]);
        }
        statuses.push(status);
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        3,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 503).count(),
        17,
        "{statuses:?}"
    );
    assert_eq!(app.openai.request_count(), 3, "refusals call no model");
    // Corrected to the reported usage: exactly 3 x 57.
    assert_eq!(counted(store.as_ref(), "chat").await, 3 * USED_PER_CALL);
    assert_eq!(spend_notices(&app), 1, "one notice for 17 refusals");

    // One at a time: admitted while the count is below 1000: 171 + 15 x 57 = 1026.
    app.openai.set_default(Behaviour::complete("はい"));
    let mut admitted = 0;
    loop {
        let response = chat(&app).await;
        match response.status().as_u16() {
            200 => admitted += 1,
            503 => break,
            other => panic!("{other}"),
        }
    }
    assert_eq!(admitted, 15);
    assert_eq!(counted(store.as_ref(), "chat").await, 1026);
    // Still refused, still one notice; the agent API has its own ceiling and count.
    error_body(chat(&app).await, 503, "SPEND_CEILING_REACHED").await;
    assert_eq!(spend_notices(&app), 1);
    assert_eq!(counted(store.as_ref(), "agent").await, 0);
}

#[tokio::test]
async fn the_agent_api_is_refused_past_its_own_ceiling_and_the_day_turns_at_jst_midnight() {
    let store: Arc<dyn Store> = Arc::new(koe_testkit::dynamodb::fresh_store().await);
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let app = spawn_app_with(&[("AGENT_DAILY_TOKEN_CEILING", "1000")], {
        let clock = clock.clone();
        |app| app.with_clock(clock).with_store(store.clone())
    })
    .await;
    let day = day();
    // The day's agent tokens are spent (e.g. by earlier calls).
    store
        .reserve_tokens("agent", &day.key, 1000, 1000, day.expire_at())
        .await
        .unwrap();
    let round_1 = json!({"message": "ねえ", "capabilities": ["calendar"],
        "deviceId": "spend-device"});
    let response = app.post_agent(&round_1).await;
    error_body(response, 503, "SPEND_CEILING_REACHED").await;
    assert_eq!(app.openai.request_count(), 0);
    assert_eq!(spend_notices(&app), 1);
    // Chat is not affected.
    assert_eq!(chat(&app).await.status().as_u16(), 200);

    // 00:00 JST: a new day, a new count.
    clock.set(day.ends_at);
    app.openai
        .script([Behaviour::agent_answer("うん", "happy")]);
    let response = app.post_agent(&round_1).await;
    assert_eq!(response.status().as_u16(), 200);
}

#[tokio::test]
async fn a_failing_counter_lets_chat_through() {
    let app = spawn_app_with(&[("CHAT_DAILY_TOKEN_CEILING", "1000")], |app| {
        app.with_store(Arc::new(koe_testkit::harness::FailingStore))
    })
    .await;
    assert_eq!(chat(&app).await.status().as_u16(), 200);
    assert!(app.events.published().is_empty());
}

/// A streamed reply (`Accept: text/event-stream`) counts as a completion does: reserved before
/// the provider is asked, corrected to the usage the stream reports last; past the ceiling the
/// stream is refused before its first byte, with the same 503 and one notice.
#[tokio::test]
async fn a_streamed_chat_is_counted_and_refused_past_the_ceiling() {
    let store: Arc<dyn Store> = Arc::new(koe_testkit::dynamodb::fresh_store().await);
    let app = app(store.clone(), "1000").await;
    app.openai.set_default(Behaviour::complete("はい。"));
    // Where streamed replies are served: koe-local's chat API, or the stream function's URL.
    let streamed = || {
        send(
            app.client
                .post(format!("{}/api/chat", app.chat_stream_url))
                .header("content-type", "application/json")
                .header("accept", "text/event-stream")
                .body(chat_body().to_string()),
        )
    };

    let response = streamed().await;
    assert_eq!(response.status().as_u16(), 200);
    let events = response.text().await.unwrap();
    assert!(events.contains("event: done"), "{events}");
    assert_eq!(
        counted(store.as_ref(), "chat").await,
        USED_PER_CALL,
        "the 400 reserved, corrected to the 57 the stream reported"
    );

    // The day's count up to the ceiling: the next stream is refused, no model call.
    let day = day();
    store
        .reserve_tokens(
            "chat",
            &day.key,
            1000 - USED_PER_CALL,
            u64::MAX,
            day.expire_at(),
        )
        .await
        .unwrap();
    let calls = app.openai.request_count();
    let refused = streamed().await;
    error_body(refused, 503, "SPEND_CEILING_REACHED").await;
    assert_eq!(app.openai.request_count(), calls, "no model call");
    assert_eq!(spend_notices(&app), 1);
}
