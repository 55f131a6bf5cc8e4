//! The daily limit of POST /agent over HTTP against the real local server, on both store
//! adapters (in-memory and DynamoDB Local): exact under concurrency, Japan days turned by a
//! manual clock, `Retry-After`, round 2 never counted, fail-open when the counter fails.
//!
//! Times are in 2035 so that counters written to DynamoDB Local never lapse by the wall clock.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use koe::domain::device::DeviceId;
use koe::store::UsageOutcome;
use koe::store::prelude::*;
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{
    FailingStore, TestApp, error_body, header, issued_step_id, on_store, spawn_app_with,
};
use koe_testkit::openai::Behaviour;
use serde_json::{Value, json};
use tokio::task::JoinSet;

/// 2035-03-01 09:00 in Tokyo.
const NOW: &str = "2035-03-01T00:00:00Z";

#[derive(Clone, Copy, Debug)]
enum Adapter {
    Memory,
    DynamoDb,
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn random_device() -> String {
    format!("limit-{:016x}", fastrand::u64(..))
}

/// An app with `AGENT_DAILY_LIMIT=limit`, a manual clock at `now`, the adapter's store, and a
/// planner that always answers.
async fn app(adapter: Adapter, limit: u32, now: &str) -> (TestApp, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::at_rfc3339(now));
    let store: Option<Arc<dyn Store>> = match adapter {
        Adapter::Memory => None,
        Adapter::DynamoDb => Some(Arc::new(koe_testkit::dynamodb::fresh_store().await)),
    };
    let limit = limit.to_string();
    let app = spawn_app_with(&[("AGENT_DAILY_LIMIT", &limit)], |app| {
        on_store(app.with_clock(clock.clone()), store)
    })
    .await;
    app.openai
        .set_default(Behaviour::agent_answer("うん！", "happy"));
    (app, clock)
}

fn round_1(device: &str) -> Value {
    json!({"message": "ねえ", "capabilities": ["calendar"], "deviceId": device})
}

/// A round 2 with the step id of a fresh plan issued at the app's now.
fn round_2(app: &TestApp, device: &str) -> Value {
    let step_id = issued_step_id(device, app.clock.now());
    json!({"message": "ねえ", "deviceId": device, "results": [
        {"stepId": step_id, "tool": "calendar", "output": {"events": []}}]})
}

async fn post(app: &TestApp, body: &Value) -> reqwest::Response {
    app.post_agent(body).await
}

/// Posts round 1 and asserts a 200 with `remaining` left; returns nothing else.
async fn allowed(app: &TestApp, device: &str, remaining: u32) {
    let response = post(app, &round_1(device)).await;
    let status = response.status().as_u16();
    let left = header(&response, "x-ratelimit-remaining");
    let body = response.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(left, Some(remaining.to_string()), "remaining");
}

/// Posts round 1 and asserts the 429 with its headers; returns `Retry-After`.
async fn refused(app: &TestApp, device: &str, limit: u32) -> u64 {
    let response = post(app, &round_1(device)).await;
    let retry_after = header(&response, "retry-after").expect("Retry-After");
    assert_eq!(
        header(&response, "x-ratelimit-limit"),
        Some(limit.to_string())
    );
    assert_eq!(
        header(&response, "x-ratelimit-remaining").as_deref(),
        Some("0")
    );
    error_body(response, 429, "DAILY_LIMIT_EXCEEDED").await;
    retry_after.parse().expect("Retry-After is whole seconds")
}

/// One more use of the device's count for `day` (stored under `limit`), read back.
async fn count(app: &TestApp, id: &DeviceId, day: &str, limit: u32) -> UsageOutcome {
    app.store.count_agent_use(id, day, limit, 0).await.unwrap()
}

// ---------------------------------------------------------------------------------------------
// The behaviours, each run on both adapters below.

async fn concurrent_calls_never_pass_the_limit(adapter: Adapter) {
    const LIMIT: u32 = 5;
    const CALLS: usize = 24;
    let (app, _clock) = app(adapter, LIMIT, NOW).await;
    let device = random_device();
    let mut calls = JoinSet::new();
    for _ in 0..CALLS {
        let request = app
            .agent(http::Method::POST, "/agent")
            .body(round_1(&device).to_string());
        calls.spawn(async move {
            let response = request.send().await.expect("reaches koe-local");
            (
                response.status().as_u16(),
                header(&response, "x-ratelimit-remaining"),
            )
        });
    }
    let mut remaining = Vec::new();
    let mut refused = 0;
    for (status, left) in calls.join_all().await {
        match status {
            200 => remaining.push(left.expect("remaining on a 200")),
            429 => refused += 1,
            other => panic!("{adapter:?}: unexpected status {other}"),
        }
    }
    remaining.sort();
    assert_eq!(
        remaining,
        ["0", "1", "2", "3", "4"],
        "{adapter:?}: exactly the limit passed, each seeing its own count"
    );
    assert_eq!(refused, CALLS - LIMIT as usize, "{adapter:?}");
    assert_eq!(
        app.openai.request_count(),
        LIMIT as usize,
        "{adapter:?}: a refused call never reaches the model"
    );
    assert!(app.events.published().is_empty(), "{adapter:?}");
    // Other devices have their own count.
    allowed(&app, &random_device(), LIMIT - 1).await;
}

async fn remaining_counts_down_then_429_with_retry_after(adapter: Adapter) {
    let (app, _clock) = app(adapter, 3, "2035-03-01T12:34:56+09:00").await;
    let device = random_device();
    for remaining in [2, 1, 0] {
        allowed(&app, &device, remaining).await;
    }
    // 12:34:56 JST → next 00:00 JST is 11 h 25 min 4 s away.
    assert_eq!(refused(&app, &device, 3).await, 41_104);
    assert_eq!(refused(&app, &device, 3).await, 41_104);
    assert_eq!(app.openai.request_count(), 3);
    assert!(app.events.published().is_empty(), "a 429 is not notified");

    // The refusals were not counted: the stored count is still 3.
    let id = DeviceId::parse("deviceId", &device).unwrap();
    assert_eq!(
        count(&app, &id, "2035-03-01", 4).await,
        UsageOutcome::Counted { count: 4 }
    );
}

async fn the_day_turns_at_jst_midnight(adapter: Adapter) {
    let (app, clock) = app(adapter, 1, "2035-03-01T23:59:59+09:00").await;
    let device = random_device();
    allowed(&app, &device, 0).await;
    assert_eq!(refused(&app, &device, 1).await, 1, "one second to midnight");
    clock.set(at("2035-03-01T23:59:59.999+09:00"));
    assert_eq!(refused(&app, &device, 1).await, 1, "rounded up, never 0");

    clock.set(at("2035-03-02T00:00:00+09:00"));
    allowed(&app, &device, 0).await;
    assert_eq!(refused(&app, &device, 1).await, 86_400, "a whole day to go");
}

async fn the_utc_date_does_not_decide_the_day(adapter: Adapter) {
    // 20:00 UTC on March 1st is 05:00 on March 2nd in Tokyo.
    let (app, clock) = app(adapter, 1, "2035-03-01T20:00:00Z").await;
    let device = random_device();
    allowed(&app, &device, 0).await;
    let id = DeviceId::parse("deviceId", &device).unwrap();
    assert_eq!(
        count(&app, &id, "2035-03-02", 1).await,
        UsageOutcome::LimitReached,
        "counted on the Japan date"
    );

    // UTC midnight (09:00 in Tokyo) turns nothing.
    clock.set(at("2035-03-01T23:59:59Z"));
    assert_eq!(refused(&app, &device, 1).await, 15 * 3600 + 1);
    clock.set(at("2035-03-02T00:00:00Z"));
    assert_eq!(refused(&app, &device, 1).await, 15 * 3600);
    // 15:00 UTC is midnight in Tokyo.
    clock.set(at("2035-03-02T15:00:00Z"));
    allowed(&app, &device, 0).await;

    // The UTC date's key was never touched.
    assert_eq!(
        count(&app, &id, "2035-03-01", 1).await,
        UsageOutcome::Counted { count: 1 }
    );
}

async fn round_2_is_never_counted(adapter: Adapter) {
    let (app, _clock) = app(adapter, 1, NOW).await;
    app.openai.set_default(Behaviour::complete(
        json!({"reply": "了解！", "emotion": "neutral"}).to_string(),
    ));
    let device = random_device();
    for _ in 0..3 {
        let response = post(&app, &round_2(&app, &device)).await;
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(header(&response, "x-ratelimit-limit").as_deref(), Some("1"));
        assert_eq!(header(&response, "x-ratelimit-remaining"), None);
    }
    app.openai
        .script([Behaviour::agent_answer("うん", "happy")]);
    allowed(&app, &device, 0).await;
    // With the day's one round 1 used, round 2 still answers.
    let response = post(&app, &round_2(&app, &device)).await;
    assert_eq!(response.status().as_u16(), 200, "round 2 is never refused");
    refused(&app, &device, 1).await;
}

async fn devices_count_separately(adapter: Adapter) {
    let (app, _clock) = app(adapter, 1, NOW).await;
    let (a, b) = (random_device(), random_device());
    allowed(&app, &a, 0).await;
    allowed(&app, &b, 0).await;
    refused(&app, &a, 1).await;
    refused(&app, &b, 1).await;
}

macro_rules! on_both_adapters {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Adapter::Memory).await;
                }
            )*
        }
        mod dynamodb {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Adapter::DynamoDb).await;
                }
            )*
        }
    };
}

on_both_adapters!(
    concurrent_calls_never_pass_the_limit,
    remaining_counts_down_then_429_with_retry_after,
    the_day_turns_at_jst_midnight,
    the_utc_date_does_not_decide_the_day,
    round_2_is_never_counted,
    devices_count_separately,
);

// ---------------------------------------------------------------------------------------------
// Adapter-specific

#[tokio::test]
async fn the_dynamodb_counter_carries_the_japan_day_and_its_expiry() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let client = koe_testkit::dynamodb::client().await;
    let tables =
        koe_testkit::dynamodb::create_tables(&client, &koe_testkit::dynamodb::random_prefix())
            .await;
    let store = Arc::new(koe::store::dynamodb::DynamoStore::new(
        client.clone(),
        tables.clone(),
    ));
    let clock = Arc::new(ManualClock::at_rfc3339("2035-03-01T20:00:00Z"));
    let app = spawn_app_with(&[], |app| app.with_clock(clock).with_store(store)).await;
    app.openai
        .set_default(Behaviour::agent_answer("うん", "happy"));
    let device = random_device();
    allowed(&app, &device, 49).await;
    allowed(&app, &device, 48).await;

    let item = client
        .get_item()
        .table_name(&tables.usage)
        .key("deviceId", AttributeValue::S(device.clone()))
        .key("day", AttributeValue::S("2035-03-02".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .expect("the counter of the Japan day");
    assert_eq!(item["useCount"], AttributeValue::N("2".into()));
    // End of 2035-03-02 in Tokyo (03-03 00:00 JST) + 7 days.
    let expected = at("2035-03-10T00:00:00+09:00").timestamp();
    assert_eq!(item["expireAt"], AttributeValue::N(expected.to_string()));
}

#[tokio::test]
async fn a_failing_counter_fails_open_without_the_remaining_header() {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let app = spawn_app_with(&[("AGENT_DAILY_LIMIT", "1")], |app| {
        app.with_clock(clock).with_store(Arc::new(FailingStore))
    })
    .await;
    app.openai
        .set_default(Behaviour::agent_answer("うん", "happy"));
    let device = random_device();
    for _ in 0..3 {
        let response = post(&app, &round_1(&device)).await;
        assert_eq!(response.status().as_u16(), 200, "allowed (fail-open)");
        assert_eq!(header(&response, "x-ratelimit-limit").as_deref(), Some("1"));
        assert_eq!(
            header(&response, "x-ratelimit-remaining"),
            None,
            "unknown, so not claimed"
        );
    }
    assert_eq!(app.openai.request_count(), 3);
    assert!(
        app.events.published().is_empty(),
        "a 200 is not an error notification"
    );
}
