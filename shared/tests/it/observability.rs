//! What the on-call engineer sees: the metrics a dispatch run (koe-local's wiring on DynamoDB
//! Local) and the chat and agent functions write are valid EMF (checked by
//! `koe_testkit::emf`, written from the format's specification) and carry what happened; the
//! template's dashboard and alarms name only metrics the code emits, and every alarm reaches the
//! alarm topic.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, FixedOffset, Utc};
use koe::App;
use koe::clock::Clock;
use koe::config::Vars;
use koe::dispatch::RunCause;
use koe::domain::device::{Device, DeviceId, PushEnvironment, VoipToken};
use koe::domain::reservation::{Reservation, ScheduledAt};
use koe::endpoints::Adapters;
use koe::metrics::MemorySink;
use koe::metrics::catalogue::{self, API, DISPATCH};
use koe::store::Store;
use koe_testkit::clock::ManualClock;
use koe_testkit::emf::{self, Emf};
use koe_testkit::harness::{send, spawn_app};
use koe_testkit::openai::Behaviour;
use koe_testkit::push::{RecordingPushSender, Scripted};
use serde_json::json;

const T0: &str = "2035-03-01T00:00:00Z";

fn at(s: i64) -> DateTime<Utc> {
    T0.parse::<DateTime<Utc>>().unwrap() + Duration::seconds(s)
}

fn token() -> VoipToken {
    let hex: String = (0..64)
        .map(|_| char::from_digit(fastrand::u32(0..16), 16).unwrap())
        .collect();
    VoipToken::parse("voipToken", &hex).unwrap()
}

async fn reserve(store: &Arc<dyn Store>, clock: &ManualClock, name: &str, when: DateTime<Utc>) {
    let device = Device {
        device_id: DeviceId::parse("deviceId", name).unwrap(),
        voip_token: token(),
        environment: PushEnvironment::Production,
        updated_at: clock.now(),
    };
    store.put_device(&device).await.unwrap();
    let now = clock.now();
    let r = Reservation::new(
        device.device_id.clone(),
        ScheduledAt::from_stored(when.with_timezone(&FixedOffset::east_opt(9 * 3600).unwrap())),
        None,
        now.min(when - Duration::seconds(10)),
    );
    store
        .create_reservation(&r, now, now - Duration::seconds(150))
        .await
        .unwrap();
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
    while clock.now() < at(72) {
        clock.set(clock.now() + Duration::milliseconds(100));
        tokio::time::sleep(StdDuration::from_millis(2)).await;
    }
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
    assert_eq!(total("PushUnknown"), 0.0);
    assert_eq!(total("StoreErrors"), 0.0);
    let mut lateness = emf::values(&lines, DISPATCH, "PushLateness");
    lateness.sort_by(f64::total_cmp);
    let mut expected: Vec<f64> = report.lateness_ms.iter().map(|&ms| ms as f64).collect();
    expected.sort_by(f64::total_cmp);
    assert_eq!(lateness, expected, "one lateness per sent push");
    // (The test's clock runs ahead of DynamoDB Local's real replies: within a step or two.)
    assert!(
        lateness[..3].iter().all(|ms| (0.0..1000.0).contains(ms)),
        "the on-time pushes: {lateness:?}"
    );
    assert!(
        (30_000.0..35_000.0).contains(&lateness[3]),
        "the overdue push: {lateness:?}"
    );
    assert_eq!(total("RunDuration"), report.duration_ms as f64);
    assert!(
        report.duration_ms >= 60_000,
        "a run covers its minute: {report:?}"
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
    assert_eq!(request_metrics(&lines, "chat", "ServerErrors"), [0.0, 1.0]);
    assert_eq!(request_metrics(&lines, "chat", "ClientErrors"), [0.0, 0.0]);
    assert_eq!(request_metrics(&lines, "health", "ServerErrors"), [0.0]);
    assert_eq!(
        request_metrics(&lines, "chat-stream", "ServerErrors"),
        [0.0]
    );
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
    app.openai.script([Behaviour::complete(
        json!({"decision": {"type": "answer", "reply": "おはよう！", "emotion": "happy"}})
            .to_string(),
    )]);
    let body = json!({"message": "おはよう", "capabilities": ["calendar"],
        "deviceId": "6F9619FF-8B86-D011-B42D-00C04FC964FF"});
    let response = send(
        app.agent(http::Method::POST, "/agent")
            .body(body.to_string()),
    )
    .await;
    assert_eq!(response.status(), 200);
    let refused = send(app.agent(http::Method::POST, "/agent").body("{}")).await;
    assert_eq!(refused.status(), 400);

    let lines = emf::parse_all(&app.metrics.lines());
    assert_eq!(request_metrics(&lines, "agent", "ClientErrors"), [0.0, 1.0]);
    assert!(emf::total(&lines, API, "ModelTokens") > 0.0);
    assert_eq!(emf::values(&lines, API, "SpendUsed").len(), 1);
}

// ---------------------------------------------------------------------------------------------
// The template's alarms and dashboard against what the code emits

fn template() -> serde_norway::Value {
    koe_testkit::template::load_yaml("template.yaml")
}

fn resources_of(template: &serde_norway::Value, kind: &str) -> Vec<(String, serde_norway::Value)> {
    template["Resources"]
        .as_mapping()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == kind)
        .map(|(id, r)| (id.as_str().unwrap().to_owned(), r.clone()))
        .collect()
}

/// A `!Ref`'s or `!Sub`'s text (`Ref x` as "x"), or a plain string.
fn text_of(value: &serde_norway::Value) -> String {
    match value {
        serde_norway::Value::Tagged(tagged) => text_of(&tagged.value),
        serde_norway::Value::String(s) => s.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

/// The functions' names as the template gives them (`${AWS::StackName}-chat`, ...).
fn function_names(template: &serde_norway::Value) -> Vec<String> {
    resources_of(template, "AWS::Serverless::Function")
        .iter()
        .map(|(_, f)| text_of(&f["Properties"]["FunctionName"]))
        .collect()
}

/// A metric of ours named by the template: in the catalogue, under its dimension names, and
/// its `Function` one of the stack's functions.
fn check_ours(
    namespace: &str,
    name: &str,
    dimensions: &[(String, String)],
    functions: &[String],
    at: &str,
) {
    if !namespace.starts_with("Koe/") {
        return;
    }
    let known = catalogue::find(namespace, name)
        .unwrap_or_else(|| panic!("{at}: {namespace}/{name} is not a metric the code emits"));
    let names: Vec<&str> = dimensions.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, known.dimensions, "{at}: {name}'s dimensions");
    for (dimension, value) in dimensions {
        // (A SEARCH term names dimensions, not their values.)
        if dimension == "Function" && !value.is_empty() {
            assert!(
                functions.contains(value),
                "{at}: {name} of {value}, not a function of the stack"
            );
        }
    }
}

#[test]
fn every_alarm_reaches_the_alarm_topic_and_names_only_emitted_metrics() {
    let template = template();
    let functions = function_names(&template);
    let alarms = resources_of(&template, "AWS::CloudWatch::Alarm");
    assert!(alarms.len() >= 14, "{} alarms", alarms.len());
    let mut ours = 0;
    for (id, alarm) in &alarms {
        let properties = &alarm["Properties"];
        for actions in ["AlarmActions", "OKActions"] {
            let targets: Vec<String> = properties[actions]
                .as_sequence()
                .unwrap_or_else(|| panic!("{id} has no {actions}"))
                .iter()
                .map(text_of)
                .collect();
            assert_eq!(targets, ["AlarmTopic"], "{id}'s {actions}");
        }
        assert!(
            text_of(&properties["AlarmName"]).starts_with("${AWS::StackName}-"),
            "{id}: the team-chat rule matches alarms by the stack's name prefix"
        );
        let mut metrics = Vec::new();
        if let Some(name) = properties["MetricName"].as_str() {
            metrics.push((
                properties["Namespace"].clone(),
                name.to_owned(),
                properties["Dimensions"].clone(),
            ));
        }
        for query in properties["Metrics"].as_sequence().into_iter().flatten() {
            let metric = &query["MetricStat"]["Metric"];
            if let Some(name) = metric["MetricName"].as_str() {
                metrics.push((
                    metric["Namespace"].clone(),
                    name.to_owned(),
                    metric["Dimensions"].clone(),
                ));
            }
        }
        assert!(!metrics.is_empty(), "{id} watches no metric");
        for (namespace, name, dimensions) in metrics {
            let dimensions: Vec<(String, String)> = dimensions
                .as_sequence()
                .into_iter()
                .flatten()
                .map(|d| (text_of(&d["Name"]), text_of(&d["Value"])))
                .collect();
            let namespace = text_of(&namespace);
            ours += usize::from(namespace.starts_with("Koe/"));
            check_ours(&namespace, &name, &dimensions, &functions, id);
        }
    }
    assert!(
        ours >= 10,
        "the alarms watch the code's own metrics ({ours})"
    );
    // The ones the runbook promises.
    let names: Vec<String> = alarms
        .iter()
        .map(|(_, a)| text_of(&a["Properties"]["AlarmName"]))
        .collect();
    for promised in [
        "dispatch-lateness",
        "dispatch-failed",
        "dispatch-missed",
        "dispatch-push-unknown",
        "dispatch-silent",
        "chat-api-5xx",
        "agent-api-5xx",
        "chat-spend-80",
        "agent-spend-80",
    ] {
        assert!(
            names.contains(&format!("${{AWS::StackName}}-{promised}")),
            "no {promised} alarm"
        );
    }
}

#[test]
fn the_dashboard_names_only_metrics_the_code_emits() {
    let template = template();
    let functions = function_names(&template);
    let [(_, dashboard)] = resources_of(&template, "AWS::CloudWatch::Dashboard")
        .try_into()
        .unwrap();
    let body = text_of(&dashboard["Properties"]["DashboardBody"]);
    let body: serde_json::Value = serde_json::from_str(&body).expect("the body is JSON");
    let mut named = std::collections::BTreeSet::new();
    for widget in body["widgets"].as_array().unwrap() {
        let title = widget["properties"]["title"].as_str().unwrap_or("text");
        for entry in widget["properties"]["metrics"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let entry = entry.as_array().unwrap();
            if let Some(expression) = entry[0]["expression"].as_str() {
                for (namespace, dimensions, name) in search_terms(expression) {
                    let dimensions: Vec<(String, String)> =
                        dimensions.into_iter().map(|d| (d, String::new())).collect();
                    check_ours(&namespace, &name, &dimensions, &functions, title);
                    named.insert(format!("{namespace}/{name}"));
                }
                continue;
            }
            let strings: Vec<&str> = entry.iter().filter_map(|v| v.as_str()).collect();
            let (namespace, name) = (strings[0], strings[1]);
            let dimensions: Vec<(String, String)> = strings[2..]
                .chunks(2)
                .map(|pair| (pair[0].to_owned(), pair[1].to_owned()))
                .collect();
            check_ours(namespace, name, &dimensions, &functions, title);
            named.insert(format!("{namespace}/{name}"));
        }
    }
    for shown in [
        "Koe/Dispatch/PushLateness",
        "Koe/Dispatch/Sent",
        "Koe/Dispatch/StoreThrottles",
        "Koe/Dispatch/ApnsErrors",
        "Koe/Dispatch/RunDuration",
        "Koe/Api/Latency",
        "Koe/Api/ModelTokens",
        "Koe/Api/SpendUsed",
        "AWS/ApiGateway/5xx",
        "AWS/Lambda/ConcurrentExecutions",
    ] {
        assert!(named.contains(shown), "the dashboard does not show {shown}");
    }
}

/// The `{Namespace,Dimension,...} MetricName="Name"` terms of a SEARCH expression (its
/// template substitutions, `${...}`, left out).
fn search_terms(expression: &str) -> Vec<(String, Vec<String>, String)> {
    let mut plain = String::new();
    let mut rest = expression;
    while let Some(at) = rest.find("${") {
        plain.push_str(&rest[..at]);
        rest = &rest[at + rest[at..].find('}').unwrap() + 1..];
    }
    plain.push_str(rest);
    let mut found = Vec::new();
    for term in plain.split('{').skip(1) {
        let (schema, after) = term.split_once('}').unwrap();
        let mut schema = schema.split(',').map(str::trim);
        let namespace = schema.next().unwrap().to_owned();
        let dimensions: Vec<String> = schema.map(str::to_owned).collect();
        let name = after
            .split("MetricName=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or_else(|| panic!("a SEARCH without a MetricName: {expression}"))
            .to_owned();
        found.push((namespace, dimensions, name));
    }
    found
}
