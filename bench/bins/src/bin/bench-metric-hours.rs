//! `bench/metric-hours.sh`'s worker: the custom metrics an hour of the stack publishes, and their cost.
//!
//! CloudWatch bills a custom metric (namespace, name and dimension values) for each hour in
//! which it receives a datapoint. Three hours are played minute by minute through the code that
//! writes the records (`koe::dispatch::metrics::records`, `koe::app::edge::request_record`,
//! `koe::calls::confirm::confirmed_record`, the spend guard on the in-memory store), and the
//! distinct metrics of their EMF lines are counted (`koe_testkit::emf`, the specification's
//! reading of a line):
//! - idle: the dispatcher runs every minute and finds nothing; no request;
//! - busy: 100,000 calls a day (4,167 in the hour, every one sent on time), a third of them to
//!   devices that confirm them (all confirmed), 500,000 requests a day spread over every route
//!   but `GET /api/error`, all answered 2xx, and model calls of chat, chat-stream and agent;
//! - faulty: the busy hour, plus one of everything that goes wrong: a run with every count (one
//!   APNs error reason), a split minute's part, a 4xx and a 5xx of every route, a failed model
//!   call of each model function.
//!
//! The alarms' and the dashboard's counts are read from `template.yaml`. Prints markdown tables.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use koe::dispatch::RunReport;
use koe::domain::chat::{ChatMessage, Role};
use koe::model::ModelRequest;
use koe::model::spend_guard::{SpendApi, SpendGuard};
use koe::platform::metrics::{MemorySink, Metrics, Record};
use koe::store::memory::MemoryStore;
use koe_testkit::clock::ManualClock;
use koe_testkit::cloudwatch::MetricId;
use koe_testkit::emf;
use serde_norway::Value;

/// CloudWatch's list prices (us-east-1 and ap-northeast-1 alike, 2026-11): a custom metric, the
/// first 10,000; a standard-resolution alarm metric (period of 60 s or more); a high-resolution
/// one; a dashboard beyond an account's first 3.
const METRIC_MONTH: f64 = 0.30;
const ALARM_METRIC_MONTH: f64 = 0.10;
const HIGH_RESOLUTION_ALARM_METRIC_MONTH: f64 = 0.30;
const DASHBOARD_MONTH: f64 = 3.00;
/// CloudWatch Logs' standard ingestion per GB: us-east-1, ap-northeast-1.
const INGESTION_GB: [f64; 2] = [0.50, 0.76];
/// The hours CloudWatch prorates a month into.
const HOURS_PER_MONTH: f64 = 730.0;

const STACK: &str = "koe";
const CALLS_PER_DAY: u32 = 100_000;
const REQUESTS_PER_DAY: u32 = 500_000;

#[derive(Clone, Copy, PartialEq)]
enum Hour {
    Idle,
    Busy,
    Faulty,
}

/// The distinct metrics each source published, and the bytes of their lines.
#[derive(Default)]
struct Published {
    metrics: BTreeMap<&'static str, BTreeSet<MetricId>>,
    bytes: usize,
}

impl Published {
    fn add(&mut self, source: &'static str, records: &[Record]) {
        self.add_lines(source, records.iter().flat_map(Record::lines));
    }

    /// The metrics of EMF `lines` (each checked against the specification).
    fn add_lines(&mut self, source: &'static str, lines: impl IntoIterator<Item = String>) {
        let set = self.metrics.entry(source).or_default();
        for line in lines {
            // Each line is one log event of its own: the line and its newline.
            self.bytes += line.len() + 1;
            let parsed = emf::parse(&line).unwrap_or_else(|e| panic!("not EMF ({e}): {line}"));
            set.extend(parsed.metrics.iter().flat_map(MetricId::of_emf));
        }
    }

    fn count(&self, source: &str) -> usize {
        self.metrics.get(source).map_or(0, BTreeSet::len)
    }

    fn total(&self) -> usize {
        self.metrics.values().map(BTreeSet::len).sum()
    }
}

fn function(binary: &str) -> String {
    format!("{STACK}-{binary}")
}

/// `total` spread over `parts` as evenly as whole numbers go.
fn share(total: u32, parts: u32, i: u32) -> u32 {
    total / parts + u32::from(i < total % parts)
}

/// The dispatch runs of the hour: the coordinator's each minute and, in a faulty hour, a part.
fn dispatch(hour: Hour, start: DateTime<Utc>, published: &mut Published) {
    let calls_in_hour = CALLS_PER_DAY / 24;
    for minute in 0..60 {
        let at = start + Duration::minutes(i64::from(minute));
        let mut run = RunReport {
            duration_ms: 70_000 + i64::from(minute % 7) * 300,
            ..RunReport::default()
        };
        if hour != Hour::Idle {
            let calls = share(calls_in_hour, 60, minute);
            run.selected = calls;
            run.claimed = calls;
            run.sent = calls;
            run.lateness_ms = (0..calls).map(|i| i64::from(2 + i % 40)).collect();
        }
        if hour == Hour::Faulty && minute == 30 {
            for count in [
                &mut run.failed,
                &mut run.push_unknown,
                &mut run.dead_tokens,
                &mut run.missed,
                &mut run.lost,
                &mut run.released,
                &mut run.abandoned,
                &mut run.resolved,
                &mut run.unresolved,
                &mut run.store_retries,
                &mut run.store_throttles,
                &mut run.store_errors,
                &mut run.tokens_removed,
                &mut run.handed_out,
                &mut run.re_pushed,
                &mut run.unconfirmed,
            ] {
                *count += 1;
            }
            run.apns_errors.insert("BadDeviceToken".into(), 1);
            let part = RunReport {
                selected: 10,
                claimed: 10,
                sent: 10,
                lateness_ms: vec![5; 10],
                duration_ms: 2_000,
                ..RunReport::default()
            };
            let records = koe::dispatch::metrics::records(&part, &function("dispatch-part"), at);
            published.add("Koe/Dispatch, dispatch parts", &records);
        }
        let records = koe::dispatch::metrics::records(&run, &function("dispatch"), at);
        published.add("Koe/Dispatch, dispatch coordinator", &records);
        if hour != Hour::Idle {
            let confirmed: Vec<Record> = (0..run.sent / 3)
                .map(|i| {
                    let latency_ms = i64::from(400 + i % 900);
                    koe::calls::confirm::confirmed_record(&function("confirm-call"), at, latency_ms)
                })
                .collect();
            published.add("Koe/Dispatch, confirm-call", &confirmed);
        }
    }
}

/// The functions that answer HTTP requests: every route's, and the streamed chat's (behind its
/// function URL, not among the routes).
fn http_functions() -> Vec<&'static str> {
    let stream = <koe::chat::api::ChatStream as koe::Endpoint>::ROUTE.binary;
    let mut binaries: Vec<&str> = koe::ROUTES.iter().map(|r| r.binary).collect();
    binaries.push(stream);
    binaries
}

/// The requests of the hour: every HTTP function but `error-test` (`GET /api/error`) in turn,
/// each answered 2xx; in a faulty hour a 4xx and a 5xx of every function too.
fn requests(hour: Hour, start: DateTime<Utc>, published: &mut Published) {
    if hour == Hour::Idle {
        return;
    }
    let all = http_functions();
    let used: Vec<&str> = all.iter().copied().filter(|b| *b != "error-test").collect();
    let per_hour = REQUESTS_PER_DAY / 24;
    let mut records = Vec::new();
    for i in 0..per_hour {
        let binary = used[i as usize % used.len()];
        let at = start + Duration::milliseconds(i64::from(i) * 3_600_000 / i64::from(per_hour));
        let latency = i64::from(20 + i % 300);
        let status = http::StatusCode::OK;
        records.push(koe::app::edge::request_record(
            &function(binary),
            at,
            latency,
            status,
        ));
    }
    if hour == Hour::Faulty {
        for binary in all {
            for status in [http::StatusCode::BAD_REQUEST, http::StatusCode::BAD_GATEWAY] {
                records.push(koe::app::edge::request_record(
                    &function(binary),
                    start,
                    9,
                    status,
                ));
            }
        }
    }
    published.add("Koe/Api, requests", &records);
}

/// The model calls of the hour through the spend guard (a reservation, its settlement; in a
/// faulty hour a failed call too) of each function that makes them.
async fn model_calls(hour: Hour, start: DateTime<Utc>, published: &mut Published) {
    if hour == Hour::Idle {
        return;
    }
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::at(start));
    let sink = MemorySink::default();
    let request = ModelRequest {
        model: "gpt-4o-mini".into(),
        messages: vec![ChatMessage {
            role: Role::User,
            content: "おはよう".into(),
        }],
        max_tokens: 300,
        response_format: None,
    };
    for (binary, api) in [
        ("chat", SpendApi::Chat),
        ("chat-stream", SpendApi::Chat),
        ("agent", SpendApi::Agent),
    ] {
        let metrics = Metrics::new(Arc::new(sink.clone()), &function(binary));
        let guard =
            SpendGuard::new(store.clone(), clock.clone(), api, 100_000_000).measured_by(metrics);
        for minute in 0..60 {
            clock.set(start + Duration::minutes(minute));
            let reserved = guard.reserve(&request).await.expect("below the ceiling");
            guard.settle(&reserved.expect("counted"), 120).await;
        }
        if hour == Hour::Faulty {
            guard.provider_failed();
        }
    }
    published.add_lines("Koe/Api, model calls", sink.lines());
}

async fn hour(hour: Hour) -> Published {
    let start = DateTime::parse_from_rfc3339("2035-03-01T09:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    let mut published = Published::default();
    dispatch(hour, start, &mut published);
    requests(hour, start, &mut published);
    model_calls(hour, start, &mut published).await;
    published
}

/// The alarms of the template: (metrics they read at standard resolution, at high resolution,
/// of them in alarms created only with a condition), and the dashboards.
fn template_counts() -> (usize, usize, usize, usize) {
    let template = koe_testkit::template::load_yaml("template.yaml");
    let resources = template["Resources"].as_mapping().unwrap();
    let (mut standard, mut high, mut conditional, mut dashboards) = (0, 0, 0, 0);
    for resource in resources.values() {
        match resource["Type"].as_str() {
            Some("AWS::CloudWatch::Dashboard") => dashboards += 1,
            Some("AWS::CloudWatch::Alarm") => {
                let p = &resource["Properties"];
                let periods: Vec<u64> = if p["MetricName"].is_string() {
                    vec![p["Period"].as_u64().unwrap()]
                } else {
                    let queries = p["Metrics"].as_sequence().unwrap();
                    queries
                        .iter()
                        .filter_map(|q| q["MetricStat"]["Period"].as_u64())
                        .collect()
                };
                let n = periods.len();
                let hi = periods.iter().filter(|&&s| s < 60).count();
                (standard, high) = (standard + n - hi, high + hi);
                if !matches!(resource["Condition"], Value::Null) {
                    conditional += n;
                }
            }
            _ => {}
        }
    }
    (standard, high, conditional, dashboards)
}

/// `n` with a comma every three digits.
fn thousands(n: usize) -> String {
    koe_testkit::docs_tables::thousands(n as u64)
}

fn dollars(x: f64) -> String {
    format!("${x:.2}")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let hours = [
        ("idle", hour(Hour::Idle).await),
        ("busy", hour(Hour::Busy).await),
        ("faulty", hour(Hour::Faulty).await),
    ];
    let mut sources: BTreeSet<&str> = BTreeSet::new();
    for (_, published) in &hours {
        sources.extend(published.metrics.keys().copied());
    }
    println!(
        "Custom metrics with data in one hour (the code's records, counted from their EMF lines):"
    );
    println!();
    println!("| source | idle hour | busy hour | faulty hour |");
    println!("| --- | ---: | ---: | ---: |");
    for source in &sources {
        let counts: Vec<String> = hours
            .iter()
            .map(|(_, p)| p.count(source).to_string())
            .collect();
        println!("| {source} | {} |", counts.join(" | "));
    }
    let row = |label: &str, cell: &dyn Fn(&Published) -> String| {
        let cells: Vec<String> = hours.iter().map(|(_, p)| cell(p)).collect();
        println!("| {label} | {} |", cells.join(" | "));
    };
    row("**metric-hours per hour**", &|p| {
        format!("**{}**", p.total())
    });
    row("custom metrics, a month of such hours", &|p| {
        dollars(p.total() as f64 * METRIC_MONTH)
    });
    row("EMF lines, bytes per hour", &|p| thousands(p.bytes));
    row("EMF log ingestion, a month of such hours", &|p| {
        let gb = p.bytes as f64 * HOURS_PER_MONTH / 1e9;
        format!(
            "{gb:.2} GB: {} (us-east-1) to {} (Tokyo)",
            dollars(gb * INGESTION_GB[0]),
            dollars(gb * INGESTION_GB[1])
        )
    });
    println!();
    let (standard, high, conditional, dashboards) = template_counts();
    let alarms =
        standard as f64 * ALARM_METRIC_MONTH + high as f64 * HIGH_RESOLUTION_ALARM_METRIC_MONTH;
    println!("Fixed, from template.yaml:");
    println!();
    println!("| item | count | per month |");
    println!("| --- | ---: | ---: |");
    println!(
        "| alarm metrics, standard resolution (high resolution: {high}; {conditional} only with ChatWebhookUrl) | {standard} | {} |",
        dollars(alarms)
    );
    println!(
        "| dashboards | {dashboards} | {} beyond an account's first 3, else $0.00 |",
        dollars(dashboards as f64 * DASHBOARD_MONTH)
    );
    println!();
    println!(
        "Prices: {} per metric-month (first 10,000 metrics), {} per standard alarm metric-month, {} high resolution, {} per dashboard-month; a metric is billed for each hour with data.",
        dollars(METRIC_MONTH),
        dollars(ALARM_METRIC_MONTH),
        dollars(HIGH_RESOLUTION_ALARM_METRIC_MONTH),
        dollars(DASHBOARD_MONTH)
    );
}
