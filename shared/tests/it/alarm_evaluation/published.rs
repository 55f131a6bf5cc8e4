//! What the stack publishes, minute by minute: the code's own records (dispatch runs, requests,
//! confirmations) as CloudWatch Logs turns their EMF lines into metrics, and AWS's metrics.

use std::ops::Range;

use chrono::{DateTime, Utc};
use koe::dispatch::RunReport;
use koe::platform::metrics::Record;
use koe::platform::metrics::catalogue::{self, DISPATCH};
use koe_testkit::cloudwatch::{MetricId, Samples};

use super::STACK;

// ---------------------------------------------------------------------------------------------
// The metrics, as the alarms name them.

pub fn dispatch(name: &str, function: &str) -> MetricId {
    MetricId::new(
        "Koe/Dispatch",
        name,
        &[("Function", &format!("{STACK}-{function}"))],
    )
}

pub fn api(name: &str, function: &str) -> MetricId {
    MetricId::new(
        "Koe/Api",
        name,
        &[("Function", &format!("{STACK}-{function}"))],
    )
}

/// A metric of the `POST /calls/confirm` function (`Koe/Dispatch`, its `Function`).
pub fn confirm(name: &str) -> MetricId {
    dispatch(name, "confirm-call")
}

pub fn lambda(name: &str, function: &str) -> MetricId {
    MetricId::new(
        "AWS/Lambda",
        name,
        &[("FunctionName", &format!("{STACK}-{function}"))],
    )
}

pub fn gateway(name: &str, api: &str) -> MetricId {
    MetricId::new("AWS/ApiGateway", name, &[("ApiId", &format!("ref:{api}"))])
}

/// A DynamoDB metric of `table` (its logical id), or of its `index`.
pub fn dynamodb(name: &str, table: &str, index: Option<&str>) -> MetricId {
    let table = format!("ref:{table}");
    match index {
        None => MetricId::new("AWS/DynamoDB", name, &[("TableName", &table)]),
        Some(index) => MetricId::new(
            "AWS/DynamoDB",
            name,
            &[("TableName", &table), ("GlobalSecondaryIndexName", index)],
        ),
    }
}

/// A minute taken past the calls table's write budget, as the create that took it past writes
/// it (`koe::calls::capacity::over_capacity_record`).
pub fn minute_over_capacity(samples: &mut Samples, minute: u32) {
    let function = format!("{STACK}-create-call");
    let record = koe::calls::capacity::over_capacity_record(&function, at(minute));
    publish(samples, minute, &[record]);
}

/// A dispatch start with the APNs key stored and its ids not, as the dispatcher writes it
/// (`koe::app::wiring::apns_config_incomplete_record`).
pub fn apns_config_incomplete(samples: &mut Samples, function: &str, minute: u32) {
    let function = format!("{STACK}-{function}");
    let record = koe::app::wiring::apns_config_incomplete_record(&function, at(minute));
    publish(samples, minute, &[record]);
}

pub fn dead_letters() -> MetricId {
    MetricId::new(
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        &[("QueueName", "getatt:NotificationDeadLetterQueue.QueueName")],
    )
}

// ---------------------------------------------------------------------------------------------
// The code's records.

/// The time of `minute` (the model only keeps the minute).
fn at(minute: u32) -> DateTime<Utc> {
    DateTime::from_timestamp(2_000_000_000 + i64::from(minute) * 60, 0).unwrap()
}

/// `records`' EMF lines, published in `minute`.
fn publish(samples: &mut Samples, minute: u32, records: &[Record]) {
    for line in records.iter().flat_map(Record::lines) {
        samples.put_emf(minute, &line);
    }
}

/// A run's records as the dispatcher writes them (`koe::dispatch::metrics::records`), ending in
/// `minute`, by `function` (`dispatch` or `dispatch-part`).
pub fn run_records(samples: &mut Samples, function: &str, minute: u32, report: &RunReport) {
    let function = format!("{STACK}-{function}");
    let records = koe::dispatch::metrics::records(report, &function, at(minute));
    publish(samples, minute, &records);
}

/// One invocation of a dispatch function ending in `minute`: the run's records and Lambda's
/// own `Errors` and `Throttles` (0).
pub fn dispatch_run(samples: &mut Samples, function: &str, minute: u32, report: &RunReport) {
    run_records(samples, function, minute, report);
    samples.put(&lambda("Errors", function), minute, 0.0);
    samples.put(&lambda("Throttles", function), minute, 0.0);
}

/// Every `Koe/Dispatch` metric of `function`'s runs (dimension `Function` only).
fn run_metrics(function: &str) -> impl Iterator<Item = MetricId> {
    catalogue::ALL
        .iter()
        .filter(|m| m.namespace == DISPATCH && m.dimensions == ["Function"])
        .map(move |m| dispatch(m.name, function))
}

/// Forgets the records of `function`'s runs in `minutes` (Lambda's metrics stay).
pub fn remove_runs(samples: &mut Samples, function: &str, minutes: Range<u32>) {
    for metric in run_metrics(function) {
        samples.remove(&metric, minutes.clone());
    }
}

/// The run of `function` in `minute` reports `report` instead of what it reported.
pub fn replace_run(samples: &mut Samples, function: &str, minute: u32, report: &RunReport) {
    remove_runs(samples, function, minute..minute + 1);
    run_records(samples, function, minute, report);
}

/// A run with nothing to do: its duration only (a run covers a 70 s window).
pub fn quiet(minute: u32) -> RunReport {
    RunReport {
        duration_ms: 70_000 + i64::from(minute % 7) * 300,
        ..RunReport::default()
    }
}

/// A run that selected, claimed and sent one push per lateness.
pub fn sending(minute: u32, lateness_ms: Vec<i64>) -> RunReport {
    let n = lateness_ms.len() as u32;
    RunReport {
        selected: n,
        claimed: n,
        sent: n,
        lateness_ms,
        ..quiet(minute)
    }
}

/// Pushes a few milliseconds late, as measured (p99 in the tens of milliseconds).
pub fn on_time(count: u32, minute: u32) -> Vec<i64> {
    (0..count)
        .map(|i| i64::from(2 + (i * 13 + minute) % 40))
        .collect()
}

/// Requests answered by `function` in `minute`, each `(latency ms, status)`, as the service
/// writes their records (`koe::app::edge::request_record`).
pub fn requests(samples: &mut Samples, function: &str, minute: u32, answers: &[(i64, u16)]) {
    let function = format!("{STACK}-{function}");
    let records: Vec<Record> = answers
        .iter()
        .map(|&(latency_ms, status)| {
            let status = http::StatusCode::from_u16(status).unwrap();
            koe::app::edge::request_record(&function, at(minute), latency_ms, status)
        })
        .collect();
    publish(samples, minute, &records);
}

/// `count` first confirmations of calls in `minute`, as the confirm function writes them
/// (`koe::calls::confirm::confirmed_record`: a repeat writes nothing).
pub fn confirmations(samples: &mut Samples, minute: u32, count: u32) {
    let function = format!("{STACK}-confirm-call");
    let records: Vec<Record> = (0..count)
        .map(|i| {
            let latency_ms = i64::from(400 + (i * 37 + minute) % 900);
            koe::calls::confirm::confirmed_record(&function, at(minute), latency_ms)
        })
        .collect();
    publish(samples, minute, &records);
}

// ---------------------------------------------------------------------------------------------
// The stacks.

/// The healthy stack's quiet hour: no call, no request.
pub const QUIET: Range<u32> = 60..120;

/// The coordinator's run in `minute` of the healthy stack: a handful of calls a minute (none in
/// the quiet hour), a part handed out every half hour, one call every 20 minutes to a
/// confirming device that ends unconfirmed (a phone off), and one every half hour to an app
/// uninstalled since (a dead token).
pub fn coordinator_run(minute: u32) -> RunReport {
    if QUIET.contains(&minute) {
        return quiet(minute);
    }
    let mut run = sending(minute, on_time(3 + (minute * 7) % 20, minute));
    run.handed_out = u32::from(minute.is_multiple_of(30));
    run.unconfirmed = u32::from(minute % 20 == 11);
    if minute % 30 == 17 {
        dead_tokens(&mut run, 1);
    }
    run
}

/// `run` also took on `n` calls to dead devices, as the dispatcher counts them: each push
/// refused 410 `Unregistered` (an uninstall), its token removed, the call `failed`.
pub fn dead_tokens(run: &mut RunReport, n: u32) {
    if n == 0 {
        return;
    }
    run.selected += n;
    run.claimed += n;
    run.failed += n;
    run.dead_tokens += n;
    run.tokens_removed += n;
    *run.apns_errors.entry("Unregistered".into()).or_default() += n;
}

/// The part's run in `minute` of the healthy stack, when the coordinator handed one out.
pub fn part_run(minute: u32) -> Option<RunReport> {
    (coordinator_run(minute).handed_out > 0).then(|| sending(minute, on_time(50, minute)))
}

/// A quiet but alive stack: a dispatch run finishes every minute (a split minute with a part
/// every half hour), a third of the calls to devices that confirm their calls, all confirmed
/// but one now and then, API traffic with a stray 5xx now and then, the day's spend rising to
/// 60% of the ceilings (`SpendUsed`, written at each reservation), the dead-letter queue empty.
pub fn healthy(hours: u32) -> Samples {
    let mut samples = Samples::new();
    for minute in 0..hours * 60 {
        let run = coordinator_run(minute);
        dispatch_run(&mut samples, "dispatch", minute, &run);
        samples.put(&dead_letters(), minute, 0.0);
        if QUIET.contains(&minute) {
            continue;
        }
        if let Some(part) = part_run(minute) {
            dispatch_run(&mut samples, "dispatch-part", minute, &part);
        }
        confirmations(&mut samples, minute, run.sent / 3);
        samples.put(&gateway("Count", "ChatApi"), minute, 30.0);
        let stray = if minute % 17 == 0 { 1.0 } else { 0.0 };
        samples.put(&gateway("5xx", "ChatApi"), minute, stray);
        samples.put(&gateway("Count", "AgentApi"), minute, 10.0);
        samples.put(&gateway("5xx", "AgentApi"), minute, 0.0);
        requests(&mut samples, "chat-stream", minute, &[(900, 200); 5]);
        let spend = 5.0 + 55.0 * f64::from(minute) / f64::from(hours * 60);
        for function in ["chat", "chat-stream", "agent"] {
            if minute % 3 == 0 {
                samples.put(&api("SpendUsed", function), minute, spend);
            }
        }
    }
    samples
}

/// A stack nobody uses: the dispatcher runs every minute and finds nothing; no request, no
/// call, no model call.
pub fn idle(hours: u32) -> Samples {
    let mut samples = Samples::new();
    for minute in 0..hours * 60 {
        dispatch_run(&mut samples, "dispatch", minute, &quiet(minute));
        samples.put(&dead_letters(), minute, 0.0);
    }
    samples
}
