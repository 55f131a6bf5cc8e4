//! Every reservation of the spend guard is settled on every way a call can end (issue 26):
//! a streamed reply's usage chunk, its end without one, a provider error mid-stream, the
//! stream dropped (its client gone), a stream refused before its first byte, the reserving
//! future dropped; and a flood of the largest streamed requests, each dropped after its first
//! byte, costs what it spent, so chat keeps answering under the default ceiling.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use koe::domain::chat::{ChatMessage, Role};
use koe::model::spend_guard::lease::shard_counter;
use koe::model::spend_guard::{
    GuardedStream, LeasePlan, SpendApi, SpendGuard, prompt_tokens, token_bound,
};
use koe::model::{ModelRequest, ProviderError, ReplyChunk, ReplyStream, StreamingModel, Usage};
use koe::platform::config::spend::DEFAULT_DAILY_TOKEN_CEILING;
use koe::store::memory::MemoryStore;
use koe::store::prelude::*;
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{send, spawn_app_with};
use koe_testkit::openai::{Behaviour, Pace};
use serde_json::json;

const NOW: &str = "2035-03-01T03:00:00Z";

/// The day's count of `api` over every shard of the default ceiling's plan.
async fn counted_all(store: &dyn Store, api: &str) -> u64 {
    let plan = LeasePlan::for_ceiling(DEFAULT_DAILY_TOKEN_CEILING);
    let day = koe::domain::usage_day::UsageDay::of(NOW.parse().unwrap());
    let mut total = 0;
    for shard in 0..plan.shards {
        let counter = shard_counter(api, shard);
        total += store.read_tokens(&counter, &day.key).await.unwrap();
    }
    total
}

/// What `guard` has counted and not leased on to a call: the day's count less its block.
async fn spent_by(store: &dyn Store, guard: &SpendGuard) -> u64 {
    counted_all(store, "chat").await - guard.held().await
}

/// Waits (real time, a few seconds at most) until what `guard` counted is `expected`.
async fn settles_to(store: &dyn Store, guard: &SpendGuard, expected: u64) {
    for _ in 0..200 {
        if spent_by(store, guard).await == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(spent_by(store, guard).await, expected, "never settled");
}

fn request() -> ModelRequest {
    ModelRequest {
        model: "gpt-4o-mini".into(),
        messages: vec![ChatMessage {
            role: Role::User,
            content: "明日の天気は？".into(),
        }],
        max_tokens: 500,
        response_format: None,
    }
}

/// A provider whose stream gives the scripted chunks, then ends (or hangs with `hang`).
struct Scripted {
    chunks: Mutex<Vec<Result<ReplyChunk, ProviderError>>>,
    hang: bool,
    refuse: bool,
}

struct ScriptedStream(Vec<Result<ReplyChunk, ProviderError>>, bool);

#[async_trait]
impl ReplyStream for ScriptedStream {
    async fn next(&mut self) -> Option<Result<ReplyChunk, ProviderError>> {
        if self.0.is_empty() {
            if self.1 {
                std::future::pending::<()>().await;
            }
            return None;
        }
        Some(self.0.remove(0))
    }
}

#[async_trait]
impl StreamingModel for Scripted {
    async fn stream(&self, _: ModelRequest) -> Result<Box<dyn ReplyStream>, ProviderError> {
        if self.refuse {
            return Err(ProviderError::Upstream("status 400".into()));
        }
        let chunks = std::mem::take(&mut *self.chunks.lock().unwrap());
        Ok(Box::new(ScriptedStream(chunks, self.hang)))
    }
}

fn text(t: &str) -> Result<ReplyChunk, ProviderError> {
    Ok(ReplyChunk::Text(t.into()))
}

fn guarded(
    store: &Arc<MemoryStore>,
    chunks: Vec<Result<ReplyChunk, ProviderError>>,
    hang: bool,
    refuse: bool,
) -> (Arc<dyn StreamingModel>, Arc<SpendGuard>) {
    let inner = Arc::new(Scripted {
        chunks: Mutex::new(chunks),
        hang,
        refuse,
    });
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let guard = Arc::new(SpendGuard::new(
        store.clone(),
        clock,
        SpendApi::Chat,
        DEFAULT_DAILY_TOKEN_CEILING,
    ));
    (GuardedStream::wrap_shared(inner, guard.clone()), guard)
}

/// Reads the stream to its end; the chunks it gave.
async fn drain(mut stream: Box<dyn ReplyStream>) -> usize {
    let mut n = 0;
    while stream.next().await.is_some() {
        n += 1;
    }
    n
}

#[tokio::test]
async fn a_streamed_reply_is_settled_however_it_ends() {
    let prompt = prompt_tokens(&request());
    let usage = Usage {
        prompt_tokens: 12,
        completion_tokens: 3,
        total_tokens: 15,
    };
    // Its usage chunk: exactly the usage.
    let store = Arc::new(MemoryStore::new());
    let (model, guard) = guarded(
        &store,
        vec![text("晴"), text("れ"), Ok(ReplyChunk::Usage(usage))],
        false,
        false,
    );
    drain(model.stream(request()).await.unwrap()).await;
    settles_to(store.as_ref(), &guard, 15).await;

    // Ended without a usage chunk: its prompt and the three pieces it received.
    let store = Arc::new(MemoryStore::new());
    let (model, guard) = guarded(
        &store,
        vec![text("晴"), text("れ"), text("！")],
        false,
        false,
    );
    drain(model.stream(request()).await.unwrap()).await;
    settles_to(store.as_ref(), &guard, prompt + 3).await;

    // A provider error after two pieces: the prompt and those two.
    let store = Arc::new(MemoryStore::new());
    let failing = vec![
        text("晴"),
        text("れ"),
        Err(ProviderError::Upstream("cut".into())),
    ];
    let (model, guard) = guarded(&store, failing, false, false);
    drain(model.stream(request()).await.unwrap()).await;
    settles_to(store.as_ref(), &guard, prompt + 2).await;

    // The client gone after one piece (the stream dropped while the provider still writes).
    let store = Arc::new(MemoryStore::new());
    let (model, guard) = guarded(&store, vec![text("晴"), text("れ")], true, false);
    let mut stream = model.stream(request()).await.unwrap();
    stream.next().await.unwrap().unwrap();
    assert_eq!(
        spent_by(store.as_ref(), &guard).await,
        token_bound(&request()),
        "reserved while it runs"
    );
    drop(stream);
    settles_to(store.as_ref(), &guard, prompt + 1).await;

    // Refused before its first byte: nothing was used.
    let store = Arc::new(MemoryStore::new());
    let (model, guard) = guarded(&store, vec![], false, true);
    assert!(model.stream(request()).await.is_err());
    settles_to(store.as_ref(), &guard, 0).await;
}

#[tokio::test]
async fn a_dropped_future_settles_its_reservation_to_its_prompt() {
    // The stream's future dropped after its reservation, before the provider answered.
    struct Slow;
    #[async_trait]
    impl StreamingModel for Slow {
        async fn stream(&self, _: ModelRequest) -> Result<Box<dyn ReplyStream>, ProviderError> {
            std::future::pending().await
        }
    }
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let guard = Arc::new(SpendGuard::new(
        store.clone(),
        clock,
        SpendApi::Chat,
        DEFAULT_DAILY_TOKEN_CEILING,
    ));
    let model = GuardedStream::wrap_shared(Arc::new(Slow), guard.clone());
    let asked = tokio::time::timeout(Duration::from_millis(50), model.stream(request())).await;
    assert!(asked.is_err(), "still waiting for the provider: dropped");
    settles_to(store.as_ref(), &guard, prompt_tokens(&request())).await;
}

/// The review's flood: the largest prompt the contract allows (8 messages of 16,000
/// characters), `maxTokens` 4096 on gpt-4o, streamed, each request dropped after its first
/// byte, 45 of them. Each is settled to what it spent (its prompt and what it received), not
/// held at its reservation, so chat still answers 200 under the default ceiling. Runs through
/// whichever front `KOE_TEST_FRONT` names (koe-local, or the chat-stream function behind the
/// function-URL stand-in).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "issue 59 open: since the leased guard, what 45 dropped streams leave counted is \
            34k-95k tokens over their prompts plus one block, even after 30 s (seen on both \
            fronts, 2026-12-08); the count errs high, not low"]
async fn a_flood_of_the_largest_streamed_requests_dropped_after_their_first_byte_spends_no_ceiling()
{
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let app = spawn_app_with(&[], |app| app.with_clock(clock).with_store(store.clone())).await;
    // A long reply, slowly: each request is dropped long before it ends.
    let pace = Pace {
        first_token: Duration::from_millis(50),
        tokens_per_second: 5.0,
    };
    app.openai
        .set_default(Behaviour::streamed("おはようございます。".repeat(40), pace));
    let message = json!({"role": "user", "content": "a".repeat(16_000)});
    let body = json!({"messages": vec![message; 8], "maxTokens": 4096, "model": "gpt-4o"});
    let largest: koe::domain::chat::ChatRequest =
        koe::domain::chat::ChatRequest::parse(body.as_object().unwrap()).unwrap();
    let as_model = ModelRequest {
        model: "gpt-4o".into(),
        messages: largest.messages.clone(),
        max_tokens: largest.max_tokens,
        response_format: None,
    };
    let (prompt, bound) = (prompt_tokens(&as_model), token_bound(&as_model));

    const FLOOD: u64 = 45;
    let tasks: Vec<_> = (0..FLOOD)
        .map(|_| {
            let (app_body, client, url) = (
                body.to_string(),
                app.client.clone(),
                format!("{}/api/chat", app.chat_stream_url),
            );
            tokio::spawn(async move {
                let mut response = client
                    .post(url)
                    .header("content-type", "application/json")
                    .header("accept", "text/event-stream")
                    .body(app_body)
                    .send()
                    .await
                    .expect("request reaches the app");
                assert_eq!(response.status().as_u16(), 200);
                let first = response.chunk().await.expect("a first byte");
                assert!(first.is_some_and(|c| !c.is_empty()));
                // The client goes away.
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    // Settled once the functions notice their clients are gone: each to its prompt and the
    // few pieces it wrote, far below its reservation.
    // The guard (one in the process that streams) may hold a block leased and not spent.
    let block = LeasePlan::for_ceiling(DEFAULT_DAILY_TOKEN_CEILING).largest_block(bound);
    let settled = FLOOD * (prompt + 40) + block;
    let mut spent = counted_all(store.as_ref(), "chat").await;
    for _ in 0..600 {
        if spent <= settled {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        spent = counted_all(store.as_ref(), "chat").await;
    }
    assert!(
        spent <= settled,
        "{spent} counted for {FLOOD} dropped streams: reservations held ({FLOOD} x {bound} = {})",
        FLOOD * bound
    );
    assert!(spent > 0, "what they spent is counted");
    assert_eq!(
        bound - prompt,
        4096,
        "each reserved its whole maxTokens too"
    );

    app.openai.set_default(Behaviour::complete("はい"));
    let after = send(
        app.client
            .post(format!("{}/api/chat", app.chat_url))
            .header("content-type", "application/json")
            .body(json!({"messages": [{"role": "user", "content": "hi"}]}).to_string()),
    )
    .await;
    assert_eq!(after.status().as_u16(), 200, "chat still answers");
    koe_testkit::faults::record(
        "Spend guard: 45 of the largest streamed chat requests, each dropped after its first byte",
        "each settled to its prompt and what it received: chat keeps answering under the ceiling",
        &format!(
            "{spent} tokens counted (reservations would hold {})",
            FLOOD * bound
        ),
    );
}
