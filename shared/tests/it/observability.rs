//! What the on-call engineer sees: the metrics a dispatch run (koe-local's wiring on DynamoDB
//! Local) and the chat and agent functions write are valid EMF (checked by
//! `koe_testkit::emf`, written from the format's specification) and carry what happened. (The
//! template's alarms and dashboard against them: `observability_template.rs`.)

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, FixedOffset, Utc};
use koe::App;
use koe::app::ports::Adapters;
use koe::dispatch::RunCause;
use koe::domain::reservation::CallId;
use koe::platform::clock::Clock;
use koe::platform::config::Vars;
use koe::platform::metrics::MemorySink;
use koe::platform::metrics::catalogue::{self, API, DISPATCH};
use koe::store::prelude::*;
use koe_testkit::clock::ManualClock;
use koe_testkit::dispatching::reserve_for;
use koe_testkit::emf::{self, Emf};
use koe_testkit::harness::{send, spawn_app};
use koe_testkit::openai::Behaviour;
use koe_testkit::push::{RecordingPushSender, Scripted, device};
use serde_json::json;

const T0: &str = "2035-03-01T00:00:00Z";
const PATIENCE: StdDuration = StdDuration::from_secs(15);

/// Walks the clock to `t` in 100 ms steps, letting woken tasks run after each.
async fn walk_to(clock: &ManualClock, t: DateTime<Utc>) {
    while clock.now() < t {
        clock.set((clock.now() + Duration::milliseconds(100)).min(t));
        tokio::time::sleep(StdDuration::from_millis(2)).await;
    }
}

fn at(s: i64) -> DateTime<Utc> {
    T0.parse::<DateTime<Utc>>().unwrap() + Duration::seconds(s)
}

fn token() -> String {
    (0..64)
        .map(|_| char::from_digit(fastrand::u32(0..16), 16).unwrap())
        .collect()
}

async fn reserve(store: &Arc<dyn Store>, clock: &ManualClock, name: &str, when: DateTime<Utc>) {
    let now = clock.now();
    let device = device(name, &token(), now);
    let at = when.with_timezone(&FixedOffset::east_opt(9 * 3600).unwrap());
    let made = now.min(when - Duration::seconds(10));
    reserve_for(store.as_ref(), &device, at, None, made, CallId::generate()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatch_runs_metrics_are_emf_with_its_counts_and_lateness() {
    let store: Arc<dyn Store> = Arc::new(koe_testkit::dynamodb::fresh_store().await);
    let clock = Arc::new(ManualClock::at(at(0)));
    let push = Arc::new(RecordingPushSender::new(clock.clone()));
    let sink = MemorySink::default();
    let app = App::local(Vars::from_pairs(&[]))
        .with_store(store.clone())
        .with_clock(clock.clone())
        .with_push(push.clone())
        .with_metrics(Arc::new(sink.clone()));
    // Sent at their seconds; one 30 s overdue (within grace: sent at once, 30 s late); one
    // whose token APNs calls bad; one past grace (missed).
    for (name, second) in [("on-time-a", 15), ("on-time-b", 15), ("on-time-c", 16)] {
        reserve(&store, &clock, name, at(second)).await;
    }
    reserve(&store, &clock, "overdue", at(-30)).await;
    reserve(&store, &clock, "bad-token", at(17)).await;
    push.script("bad-token", [Scripted::bad_device_token()]);
    reserve(&store, &clock, "missed", at(-130)).await;

    let dispatcher = app.dispatcher().await.unwrap();
    let run = tokio::spawn(async move { dispatcher.run(RunCause::Local).await });
    // The clock is held until the pushes due are attempted, so the lateness measured is the
    // dispatcher's, not the test machine's: the overdue call leaves at the run's start, 30 s
    // late; the others at their seconds.
    let attempted = |devices: &'static [&'static str]| {
        let push = push.clone();
        async move {
            push.wait_for(&format!("pushes to {devices:?}"), PATIENCE, |a| {
                devices.iter().all(|d| a.iter().any(|p| p.device_id == *d))
            })
            .await
        }
    };
    attempted(&["overdue"]).await;
    for (second, devices) in [
        (15, &["on-time-a", "on-time-b"][..]),
        (16, &["on-time-c"][..]),
        (17, &["bad-token"][..]),
    ] {
        walk_to(&clock, at(second)).await;
        attempted(devices).await;
    }
    walk_to(&clock, at(72)).await;
    let report = tokio::time::timeout(StdDuration::from_secs(30), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (report.sent, report.failed, report.missed),
        (4, 1, 1),
        "{report:?}"
    );

    let lines = emf::parse_all(&sink.lines());
    let total = |name| emf::total(&lines, DISPATCH, name);
    assert_eq!(total("Selected"), 6.0);
    assert_eq!(total("Sent"), 4.0);
    assert_eq!(total("Failed"), 1.0);
    assert_eq!(total("Missed"), 1.0);
    assert_eq!(total("TokensRemoved"), 1.0);
    // A count the run does not have is not written (a metric costs in each hour it has data).
    for zero in ["PushUnknown", "StoreErrors", "Unresolved", "PartsHandedOut"] {
        assert!(metrics(&lines, DISPATCH, zero).is_empty(), "{zero} written");
    }
    let mut lateness = emf::values(&lines, DISPATCH, "PushLateness");
    lateness.sort_by(f64::total_cmp);
    let mut expected: Vec<f64> = report.lateness_ms.iter().map(|&ms| ms as f64).collect();
    expected.sort_by(f64::total_cmp);
    assert_eq!(lateness, expected, "one lateness per sent push");
    assert_eq!(lateness, [0.0, 0.0, 0.0, 30_000.0]);
    assert_eq!(total("RunDuration"), report.duration_ms as f64);
    assert!(
        (17_000..20_000).contains(&report.duration_ms),
        "a run stays until its last call (17 s), not its whole window: {report:?}"
    );
    let apns: Vec<&emf::Metric> = metrics(&lines, DISPATCH, "ApnsErrors");
    assert_eq!(apns.len(), 1);
    assert!(
        apns[0].has_dimension("Reason", "BadDeviceToken"),
        "{apns:?}"
    );
    assert!(apns[0].has_dimension("Function", "koe-local"));
    for metric in lines.iter().flat_map(|l| &l.metrics) {
        assert!(metric.has_dimension("Function", "koe-local"), "{metric:?}");
        in_catalogue(metric);
    }
}

fn metrics<'a>(lines: &'a [Emf], namespace: &str, name: &str) -> Vec<&'a emf::Metric> {
    lines
        .iter()
        .flat_map(|l| &l.metrics)
        .filter(|m| m.namespace == namespace && m.name == name)
        .collect()
}

/// The metric is the catalogue's, with its unit and dimensions.
fn in_catalogue(metric: &emf::Metric) {
    let known = catalogue::find(&metric.namespace, &metric.name)
        .unwrap_or_else(|| panic!("{metric:?} is not in the catalogue"));
    assert_eq!(metric.unit.as_deref(), Some(known.unit.as_str()));
    let names: Vec<&str> = metric.dimensions[0].keys().map(String::as_str).collect();
    let mut expected = known.dimensions.to_vec();
    expected.sort_unstable();
    assert_eq!(names, expected, "{}", metric.name);
}

/// No value at all (a metric the line does not carry).
const NONE: [f64; 0] = [];

/// The request line of `function` in `lines`.
fn request_metrics(lines: &[Emf], function: &str, name: &str) -> Vec<f64> {
    metrics(lines, API, name)
        .into_iter()
        .filter(|m| m.has_dimension("Function", function))
        .flat_map(|m| m.values.iter().copied())
        .collect()
}

#[tokio::test]
async fn chat_requests_write_latency_tokens_spend_and_provider_errors() {
    let app = spawn_app(&[("CHAT_DAILY_TOKEN_CEILING", "1000")]).await;
    app.openai.script([Behaviour::complete("こんにちは")]);
    let body = json!({"messages": [{"role": "user", "content": "こんにちは"}]}).to_string();
    let body = &body;
    assert_eq!(app.post_chat(body.clone()).await.status(), 200);
    app.openai.script([Behaviour::insufficient_quota()]);
    assert!(app.post_chat(body.clone()).await.status().is_server_error());
    assert_eq!(app.get("/health").await.status(), 200);
    app.openai.script([Behaviour::streamed(
        "おはよう。今日もがんばろう。",
        koe_testkit::openai::Pace::INSTANT,
    )]);
    let streamed = app.post_chat_stream(body.clone()).await;
    assert_eq!(streamed.status(), 200);
    streamed.text().await.unwrap();

    // The stream's record is written when it ends, after its last event reached the client.
    let deadline = std::time::Instant::now() + StdDuration::from_secs(5);
    while request_metrics(
        &emf::parse_all(&app.metrics.lines()),
        "chat-stream",
        "Latency",
    )
    .is_empty()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no record of the stream"
        );
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    let lines = emf::parse_all(&app.metrics.lines());
    for metric in lines.iter().flat_map(|l| &l.metrics) {
        in_catalogue(metric);
    }
    let latency = request_metrics(&lines, "chat", "Latency");
    assert_eq!(latency.len(), 2, "one latency per chat request");
    // An error count only for the request that failed: a success writes none (not 0).
    assert_eq!(request_metrics(&lines, "chat", "ServerErrors"), [1.0]);
    assert_eq!(request_metrics(&lines, "chat", "ClientErrors"), NONE);
    assert_eq!(request_metrics(&lines, "health", "Latency").len(), 1);
    assert_eq!(request_metrics(&lines, "health", "ServerErrors"), NONE);
    assert_eq!(request_metrics(&lines, "chat-stream", "ServerErrors"), NONE);
    // The completion's usage (40 + 17 tokens), the failed call (nothing used), the stream's.
    let tokens = emf::values(&lines, API, "ModelTokens");
    assert_eq!(tokens[..2], [57.0, 0.0]);
    assert!(tokens.len() == 3 && tokens[2] > 0.0, "{tokens:?}");
    assert_eq!(emf::total(&lines, API, "ProviderErrors"), 1.0);
    let spend = emf::values(&lines, API, "SpendUsed");
    assert_eq!(spend.len(), 3, "one per reservation: {spend:?}");
    // The first reservation's estimate of a 1000-token day (prompt plus maxTokens, capped at
    // the ceiling's 100%).
    assert!(spend.iter().all(|p| (0.0..=100.0).contains(p) && *p > 0.0));
}

#[tokio::test]
async fn the_agent_writes_its_tokens_and_a_client_error_is_counted() {
    let app = spawn_app(&[]).await;
    app.openai
        .script([Behaviour::agent_answer("おはよう！", "happy")]);
    let body = json!({"message": "おはよう", "capabilities": ["calendar"],
        "deviceId": "6F9619FF-8B86-D011-B42D-00C04FC964FF"});
    let response = app.post_agent(&body).await;
    assert_eq!(response.status(), 200);
    let refused = send(app.agent(http::Method::POST, "/agent").body("{}")).await;
    assert_eq!(refused.status(), 400);

    let lines = emf::parse_all(&app.metrics.lines());
    assert_eq!(request_metrics(&lines, "agent", "Latency").len(), 2);
    assert_eq!(request_metrics(&lines, "agent", "ClientErrors"), [1.0]);
    assert_eq!(request_metrics(&lines, "agent", "ServerErrors"), NONE);
    assert!(emf::total(&lines, API, "ModelTokens") > 0.0);
    assert_eq!(emf::values(&lines, API, "SpendUsed").len(), 1);
}
