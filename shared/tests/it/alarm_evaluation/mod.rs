//! The template's alarms do what the runbook says: every alarm of `template.yaml` is a row of the
//! alarm table of `docs/operations.md` with the same threshold and window, each row's incidents
//! (per-minute metric data, as the stack would publish it) put that alarm in ALARM within the
//! window the row states, once, and a healthy stack puts none in ALARM over hours. The alarms run
//! on `koe_testkit::cloudwatch`, a model of CloudWatch's evaluation (M of N, missing data,
//! metric math).

use std::collections::{BTreeMap, BTreeSet};

use koe_testkit::cloudwatch::{Alarm, Comparison, MetricId, Samples, State, alarm_from_properties};
use serde_norway::Value;

/// The stack's name in the model: `${AWS::StackName}-dispatch` is `koe-dispatch`.
const STACK: &str = "koe";

/// Every `AWS::CloudWatch::Alarm` of the template, by its name without the stack's prefix.
fn template_alarms() -> BTreeMap<String, Alarm> {
    let template = koe_testkit::template::load_yaml("template.yaml");
    let resources = template["Resources"].as_mapping().unwrap();
    let resolve = |value: &Value| resolve(&template, value);
    resources
        .values()
        .filter(|r| r["Type"] == "AWS::CloudWatch::Alarm")
        .map(|r| {
            let alarm = alarm_from_properties(&r["Properties"], &resolve);
            let short = alarm
                .name
                .strip_prefix(&format!("{STACK}-"))
                .unwrap_or_else(|| panic!("{}: not named after the stack", alarm.name))
                .to_owned();
            (short, alarm)
        })
        .collect()
}

/// `!Sub` with `${AWS::StackName}`; `!Ref` of a function: its `FunctionName`; any other `!Ref`
/// or `!GetAtt` stays symbolic (`ref:ChatApi`), as the metrics below name them.
fn resolve(template: &Value, value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Tagged(tagged) if tagged.tag == "Sub" => {
            let text = tagged.value.as_str().expect("a one-string !Sub");
            let text = text.replace("${AWS::StackName}", STACK);
            assert!(!text.contains("${"), "unresolved substitution in {text}");
            text
        }
        Value::Tagged(tagged) if tagged.tag == "Ref" => {
            let id = tagged.value.as_str().unwrap();
            let resource = &template["Resources"][id];
            match &resource["Properties"]["FunctionName"] {
                Value::Null => format!("ref:{id}"),
                name => resolve(template, name),
            }
        }
        Value::Tagged(tagged) if tagged.tag == "GetAtt" => {
            format!("getatt:{}", tagged.value.as_str().expect("!GetAtt a.b"))
        }
        other => panic!("a value the alarms do not use: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The runbook's table.

/// What a row of the runbook's alarm table says fires it.
#[derive(Debug, PartialEq)]
struct Promise {
    comparison: Comparison,
    threshold: f64,
    datapoints: u32,
    periods: u32,
    period_minutes: u32,
}

/// The alarm table's rows: each alarm the first cell names, with what the second cell says.
fn runbook_alarms() -> BTreeMap<String, Promise> {
    let text =
        std::fs::read_to_string(koe_testkit::template::repo_root().join("docs/operations.md"))
            .unwrap();
    let section = text
        .split("\n## Alarms and what to do\n")
        .nth(1)
        .expect("the runbook has its alarm section");
    let section = section.split("\n## ").next().unwrap();
    let mut rows = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let names: Vec<&str> = cells[0].split('`').skip(1).step_by(2).collect();
        assert!(!names.is_empty(), "a row without an alarm: {line}");
        for name in names {
            let promise = promise(cells[1]).unwrap_or_else(|e| panic!("{name}: {e}: {}", cells[1]));
            assert!(
                rows.insert(name.to_owned(), promise).is_none(),
                "{name} twice"
            );
        }
    }
    rows
}

/// Reads "`X` > 1,000 ms in 2 of 3 periods of 1 minute" (`>`, `≥`, `<`, `≤`): the first
/// comparison with a number, and the first "M of N period(s) of P minute(s)".
fn promise(cell: &str) -> Result<Promise, String> {
    let words: Vec<&str> = cell.split_whitespace().collect();
    let number = |w: &str| -> Option<f64> {
        let digits: String = w
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '.')
            .filter(|c| *c != ',')
            .collect();
        digits.parse().ok()
    };
    let (comparison, threshold) = words
        .windows(2)
        .find_map(|w| {
            let comparison = match w[0] {
                ">" => Comparison::GreaterThanThreshold,
                "≥" => Comparison::GreaterThanOrEqualToThreshold,
                "<" => Comparison::LessThanThreshold,
                "≤" => Comparison::LessThanOrEqualToThreshold,
                _ => return None,
            };
            Some((comparison, number(w[1])?))
        })
        .ok_or("no comparison with a threshold (`> 1,000`)")?;
    let whole = |w: &str| w.parse::<u32>().ok();
    let (datapoints, periods, period_minutes) = words
        .windows(7)
        .find_map(|w| {
            let fits = w[1] == "of"
                && w[3].starts_with("period")
                && w[4] == "of"
                && w[6].starts_with("minute");
            fits.then_some((whole(w[0])?, whole(w[2])?, whole(w[5])?))
        })
        .ok_or("no window (`in 2 of 3 periods of 1 minute`)")?;
    Ok(Promise {
        comparison,
        threshold,
        datapoints,
        periods,
        period_minutes,
    })
}

#[test]
fn the_runbook_table_and_the_template_state_the_same_alarms() {
    let alarms = template_alarms();
    let runbook = runbook_alarms();
    let in_template: BTreeSet<&String> = alarms.keys().collect();
    let in_runbook: BTreeSet<&String> = runbook.keys().collect();
    assert_eq!(
        in_template, in_runbook,
        "the template's alarms and the runbook's rows"
    );
    for (name, alarm) in &alarms {
        let stated = &runbook[name];
        let real = Promise {
            comparison: alarm.comparison,
            threshold: alarm.threshold,
            datapoints: alarm.datapoints_to_alarm,
            periods: alarm.evaluation_periods,
            period_minutes: alarm.period_minutes,
        };
        assert_eq!(
            &real, stated,
            "{name}: the template (left) and the runbook (right)"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The metrics the stack publishes, as the alarms name them.

fn dispatch(name: &str, function: &str) -> MetricId {
    MetricId::new(
        "Koe/Dispatch",
        name,
        &[("Function", &format!("{STACK}-{function}"))],
    )
}

fn api(name: &str, function: &str) -> MetricId {
    MetricId::new(
        "Koe/Api",
        name,
        &[("Function", &format!("{STACK}-{function}"))],
    )
}

/// A metric of the `POST /calls/confirm` function (`Koe/Dispatch`, its `Function`).
fn confirm(name: &str) -> MetricId {
    dispatch(name, "confirm-call")
}

fn lambda(name: &str, function: &str) -> MetricId {
    MetricId::new(
        "AWS/Lambda",
        name,
        &[("FunctionName", &format!("{STACK}-{function}"))],
    )
}

fn gateway(name: &str, api: &str) -> MetricId {
    MetricId::new("AWS/ApiGateway", name, &[("ApiId", &format!("ref:{api}"))])
}

fn dead_letters() -> MetricId {
    MetricId::new(
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        &[("QueueName", "getatt:NotificationDeadLetterQueue.QueueName")],
    )
}

/// One dispatch run's record (coordinator or part) ending in `minute`: its counts and the
/// lateness of each push it sent.
fn dispatch_run(samples: &mut Samples, function: &str, minute: u32, lateness_ms: &[f64]) {
    samples.put(
        &dispatch("RunDuration", function),
        minute,
        70_000.0 + f64::from(minute % 7) * 300.0,
    );
    samples.put(
        &dispatch("Sent", function),
        minute,
        lateness_ms.len() as f64,
    );
    for zero in [
        "Missed",
        "Failed",
        "PushUnknown",
        "Released",
        "Unresolved",
        "Unconfirmed",
    ] {
        samples.put(&dispatch(zero, function), minute, 0.0);
    }
    samples.put_all(
        &dispatch("PushLateness", function),
        minute,
        lateness_ms.iter().copied(),
    );
    samples.put(&lambda("Errors", function), minute, 0.0);
    samples.put(&lambda("Throttles", function), minute, 0.0);
}

/// Pushes a few milliseconds late, as measured (p99 in the tens of milliseconds).
fn on_time(count: u32, minute: u32) -> Vec<f64> {
    (0..count)
        .map(|i| f64::from(2 + (i * 13 + minute) % 40))
        .collect()
}

/// The confirm function's records in `minute`: one per confirmation, `Confirmed` 1 for a
/// call's first (a repeat writes 0), with its latency from the reserved second.
fn confirmations(samples: &mut Samples, minute: u32, count: u32) {
    samples.put_all(&confirm("Confirmed"), minute, (0..count).map(|_| 1.0));
    samples.put_all(
        &confirm("ConfirmLatency"),
        minute,
        (0..count).map(|i| f64::from(400 + (i * 37 + minute) % 900)),
    );
}

/// A quiet but alive stack: a dispatch run finishes every minute (a split minute with a part
/// every half hour), a handful of calls a minute except a quiet hour (01:00 to 02:00) with
/// none, a third of them to devices that confirm their calls, all confirmed but one now and
/// then (a phone off: one call every 20 minutes ends unconfirmed), API traffic with a stray
/// 5xx now and then, the day's spend rising to 60% of the ceilings, the dead-letter queue empty.
fn healthy(hours: u32) -> Samples {
    let mut samples = Samples::new();
    for minute in 0..hours * 60 {
        let quiet = (60..120).contains(&minute);
        let calls = if quiet { 0 } else { 3 + (minute * 7) % 20 };
        dispatch_run(&mut samples, "dispatch", minute, &on_time(calls, minute));
        if minute % 30 == 0 && !quiet {
            dispatch_run(&mut samples, "dispatch-part", minute, &on_time(50, minute));
        }
        if !quiet {
            confirmations(&mut samples, minute, calls / 3);
            if minute % 20 == 11 {
                samples.put(&dispatch("Unconfirmed", "dispatch"), minute, 1.0);
            }
        }
        if !quiet {
            samples.put(&gateway("Count", "ChatApi"), minute, 30.0);
            let stray = if minute % 17 == 0 { 1.0 } else { 0.0 };
            samples.put(&gateway("5xx", "ChatApi"), minute, stray);
            samples.put(&gateway("Count", "AgentApi"), minute, 10.0);
            samples.put(&gateway("5xx", "AgentApi"), minute, 0.0);
            samples.put_all(&api("Latency", "chat-stream"), minute, [900.0; 5]);
            samples.put_all(&api("ServerErrors", "chat-stream"), minute, [0.0; 5]);
            let spend = 5.0 + 55.0 * f64::from(minute) / f64::from(hours * 60);
            for function in ["chat", "chat-stream", "agent"] {
                if minute % 3 == 0 {
                    samples.put(&api("SpendUsed", function), minute, spend);
                }
            }
        }
        samples.put(&dead_letters(), minute, 0.0);
    }
    samples
}

const HOURS: u32 = 6;

#[test]
fn a_healthy_stack_pages_no_one_for_hours() {
    let samples = healthy(HOURS);
    for (name, alarm) in template_alarms() {
        for stat in alarm.metric_stats() {
            assert!(
                samples.has(&stat.metric),
                "{name}: the healthy stack publishes no {}",
                stat.metric
            );
        }
        let evaluation = alarm.evaluate(&samples, 0..HOURS * 60);
        assert_eq!(
            evaluation.alarms(),
            Vec::<u32>::new(),
            "{name} fired on a healthy stack"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Incidents, per row of the runbook.

struct Incident {
    alarm: &'static str,
    what: &'static str,
    /// The minute in which the runbook's condition is met.
    met_in: u32,
    /// A minute by which it is over and the alarm is OK again (none: it lasts to the end).
    cleared_by: Option<u32>,
    inject: fn(&mut Samples),
}

fn every_other_minute(from: u32, to: u32) -> impl Iterator<Item = u32> {
    (from..to).step_by(2)
}

fn incidents() -> Vec<Incident> {
    vec![
        Incident {
            alarm: "dispatch-missed",
            what: "one missed call in minute 67 of an otherwise quiet hour",
            met_in: 67,
            cleared_by: Some(80),
            inject: |s| s.put(&dispatch("Missed", "dispatch"), 67, 1.0),
        },
        Incident {
            alarm: "dispatch-missed",
            what: "a part records a missed call every other minute for 20 minutes",
            met_in: 100,
            cleared_by: Some(130),
            inject: |s| {
                for minute in every_other_minute(100, 120) {
                    s.put(&dispatch("Missed", "dispatch-part"), minute, 1.0);
                }
            },
        },
        Incident {
            alarm: "dispatch-failed",
            what: "one failed call in minute 7",
            met_in: 7,
            cleared_by: Some(20),
            inject: |s| s.put(&dispatch("Failed", "dispatch"), 7, 1.0),
        },
        Incident {
            alarm: "dispatch-failed",
            what: "one failed call every other minute for 20 minutes",
            met_in: 40,
            cleared_by: Some(70),
            inject: |s| {
                for minute in every_other_minute(40, 60) {
                    s.put(&dispatch("Failed", "dispatch"), minute, 1.0);
                }
            },
        },
        Incident {
            alarm: "dispatch-push-unknown",
            what: "one push in an unknown state (recorded failed too) in a part, minute 7",
            met_in: 7,
            cleared_by: Some(20),
            inject: |s| {
                s.put(&dispatch("PushUnknown", "dispatch-part"), 7, 1.0);
                s.put(&dispatch("Failed", "dispatch-part"), 7, 1.0);
            },
        },
        Incident {
            alarm: "dispatch-push-unknown",
            what: "one push in an unknown state every other minute for 20 minutes",
            met_in: 200,
            cleared_by: Some(230),
            inject: |s| {
                for minute in every_other_minute(200, 220) {
                    s.put(&dispatch("PushUnknown", "dispatch"), minute, 1.0);
                    s.put(&dispatch("Failed", "dispatch"), minute, 1.0);
                }
            },
        },
        Incident {
            alarm: "dispatch-lateness",
            what: "the coordinator's p99 over 1 s in minutes 40 and 42 (2 of 3)",
            met_in: 42,
            cleared_by: Some(50),
            inject: |s| {
                for minute in [40, 42] {
                    let mut pushes = on_time(97, minute);
                    pushes.extend([1500.0; 3]);
                    s.put_all(&dispatch("PushLateness", "dispatch"), minute, pushes);
                }
            },
        },
        Incident {
            alarm: "dispatch-lateness",
            what: "the parts' p99 over 1 s in minutes 150 and 151",
            met_in: 151,
            cleared_by: Some(160),
            inject: |s| {
                for minute in [150, 151] {
                    let mut pushes = on_time(48, minute);
                    pushes.extend([1200.0; 2]);
                    s.put_all(&dispatch("PushLateness", "dispatch-part"), minute, pushes);
                }
            },
        },
        Incident {
            alarm: "dispatch-silent",
            what: "no dispatch run finishes from minute 30 to 49 (no RunDuration at all)",
            met_in: 32,
            cleared_by: Some(55),
            inject: |s| {
                for name in [
                    "RunDuration",
                    "Sent",
                    "Missed",
                    "Failed",
                    "PushUnknown",
                    "PushLateness",
                ] {
                    s.remove(&dispatch(name, "dispatch"), 30..50);
                }
            },
        },
        Incident {
            alarm: "dispatch-errors",
            what: "one dispatch invocation fails in minute 12",
            met_in: 12,
            cleared_by: Some(25),
            inject: |s| s.put(&lambda("Errors", "dispatch"), 12, 1.0),
        },
        Incident {
            alarm: "dispatch-part-errors",
            what: "one part fails in minute 90",
            met_in: 90,
            cleared_by: Some(105),
            inject: |s| s.put(&lambda("Errors", "dispatch-part"), 90, 1.0),
        },
        Incident {
            alarm: "dispatch-throttles",
            what: "one dispatch invocation throttled in minute 12",
            met_in: 12,
            cleared_by: Some(25),
            inject: |s| s.put(&lambda("Throttles", "dispatch"), 12, 1.0),
        },
        Incident {
            alarm: "dispatch-part-throttles",
            what: "one part throttled in minute 90",
            met_in: 90,
            cleared_by: Some(105),
            inject: |s| s.put(&lambda("Throttles", "dispatch-part"), 90, 1.0),
        },
        Incident {
            alarm: "calls-unconfirmed",
            what: "iOS stopped waking the app: 30% of 40 confirming calls in 15 minutes \
                   (minutes 135 to 149) end unconfirmed",
            met_in: 139,
            cleared_by: Some(170),
            inject: |s| confirming_quarter(s, 135, 28, 12),
        },
        Incident {
            alarm: "calls-unconfirmed",
            what: "the confirmations fail for an hour: every confirming call from minute 200 \
                   ends unconfirmed, in the coordinator and the parts",
            met_in: 200,
            cleared_by: Some(285),
            inject: |s| {
                for quarter in (195..255).step_by(15) {
                    confirming_quarter(s, quarter, 0, 60);
                }
            },
        },
        Incident {
            alarm: "chat-api-5xx",
            what: "the chat API answers 3 of its 30 requests a minute 5xx, minutes 150 to 154",
            met_in: 154,
            cleared_by: Some(165),
            inject: |s| {
                for minute in 150..155 {
                    s.put(&gateway("5xx", "ChatApi"), minute, 3.0);
                }
            },
        },
        Incident {
            alarm: "chat-api-5xx",
            what: "the streamed chat answers 4 more requests a minute, all 5xx, minutes 150 to 154",
            met_in: 154,
            cleared_by: Some(165),
            inject: |s| {
                for minute in 150..155 {
                    s.put_all(&api("Latency", "chat-stream"), minute, [30.0; 4]);
                    s.put_all(&api("ServerErrors", "chat-stream"), minute, [1.0; 4]);
                }
            },
        },
        Incident {
            alarm: "agent-api-5xx",
            what: "the agent API answers 2 of its 10 requests a minute 5xx, minutes 200 to 204",
            met_in: 204,
            cleared_by: Some(215),
            inject: |s| {
                for minute in 200..205 {
                    s.put(&gateway("5xx", "AgentApi"), minute, 2.0);
                }
            },
        },
        Incident {
            alarm: "chat-spend-80",
            what: "a quiet evening over 80%: one chat call every 20 minutes from minute 120, \
                   the day turning at minute 200",
            met_in: 120,
            cleared_by: Some(205),
            inject: |s| spend_over_80(s, &["chat", "chat-stream"]),
        },
        Incident {
            alarm: "chat-spend-80",
            what: "streamed chat calls every minute at 85% from minute 240",
            met_in: 240,
            cleared_by: None,
            inject: |s| {
                for minute in 240..HOURS * 60 {
                    s.put(&api("SpendUsed", "chat-stream"), minute, 85.0);
                }
            },
        },
        Incident {
            alarm: "agent-spend-80",
            what: "a quiet evening over 80%: one agent call every 20 minutes from minute 120",
            met_in: 120,
            cleared_by: Some(205),
            inject: |s| spend_over_80(s, &["agent"]),
        },
        Incident {
            alarm: "notifications-undelivered",
            what: "two error notifications wait in the dead-letter queue, minutes 50 to 79",
            met_in: 50,
            cleared_by: Some(90),
            inject: |s| {
                s.remove(&dead_letters(), 50..80);
                for minute in 50..80 {
                    s.put(&dead_letters(), minute, 2.0);
                }
            },
        },
    ]
}

/// The confirming devices' calls of the quarter hour from `from` (a period of the
/// calls-unconfirmed alarm) replaced by `confirmed` confirmed and `unconfirmed` unconfirmed
/// calls, spread over its minutes; the unconfirmed ones alternate between the coordinator and
/// the parts.
fn confirming_quarter(samples: &mut Samples, from: u32, confirmed: u32, unconfirmed: u32) {
    let minutes = from..from + 15;
    samples.remove(&confirm("Confirmed"), minutes.clone());
    samples.remove(&confirm("ConfirmLatency"), minutes.clone());
    for function in ["dispatch", "dispatch-part"] {
        samples.remove(&dispatch("Unconfirmed", function), minutes.clone());
    }
    for minute in minutes.clone() {
        samples.put(&dispatch("Unconfirmed", "dispatch"), minute, 0.0);
    }
    for i in 0..confirmed {
        confirmations(samples, from + i % 15, 1);
    }
    for i in 0..unconfirmed {
        let function = if i % 2 == 0 {
            "dispatch"
        } else {
            "dispatch-part"
        };
        samples.put(&dispatch("Unconfirmed", function), from + i % 15, 1.0);
    }
}

/// From minute 120 only one call every 20 minutes (by the first of `functions`, which share
/// one ceiling), each over 80%; the day turns at minute 200 (00:00 JST) and the next calls count
/// from near 0.
fn spend_over_80(samples: &mut Samples, functions: &[&str]) {
    for function in functions {
        samples.remove(&api("SpendUsed", function), 120..HOURS * 60);
    }
    for minute in (120..HOURS * 60).step_by(20) {
        let share = if minute < 200 {
            81.0 + f64::from(minute - 120) / 10.0
        } else {
            1.0
        };
        samples.put(&api("SpendUsed", functions[0]), minute, share);
    }
}

/// What comes near an alarm's condition without meeting it: the alarm stays quiet.
struct NearMiss {
    alarm: &'static str,
    what: &'static str,
    inject: fn(&mut Samples),
}

fn near_misses() -> Vec<NearMiss> {
    vec![
        NearMiss {
            alarm: "calls-unconfirmed",
            what: "2 of 100 confirming calls in 15 minutes end unconfirmed (2%)",
            inject: |s| confirming_quarter(s, 180, 98, 2),
        },
        NearMiss {
            alarm: "calls-unconfirmed",
            what: "4 of 4 confirming calls in a quiet quarter hour end unconfirmed: \
                   fewer than 5",
            inject: |s| confirming_quarter(s, 75, 0, 4),
        },
        NearMiss {
            alarm: "calls-unconfirmed",
            what: "10% exactly: 6 of 60 confirming calls in 15 minutes end unconfirmed",
            inject: |s| confirming_quarter(s, 240, 54, 6),
        },
    ]
}

#[test]
fn a_near_miss_pages_no_one() {
    let alarms = template_alarms();
    let mut failures = Vec::new();
    for near_miss in near_misses() {
        let alarm = &alarms[near_miss.alarm];
        let mut samples = healthy(HOURS);
        (near_miss.inject)(&mut samples);
        let pages = alarm.evaluate(&samples, 0..HOURS * 60).alarms();
        if !pages.is_empty() {
            failures.push(format!(
                "{} ({}): fires at minutes {pages:?}",
                near_miss.alarm, near_miss.what
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn each_incident_of_the_runbook_pages_once_within_its_window() {
    let alarms = template_alarms();
    let runbook = runbook_alarms();
    let incidents = incidents();
    for name in alarms.keys() {
        assert!(
            incidents.iter().any(|i| i.alarm == name),
            "{name}: no incident of its row is tried"
        );
    }
    let mut failures = Vec::new();
    for incident in &incidents {
        let alarm = &alarms[incident.alarm];
        let mut samples = healthy(HOURS);
        (incident.inject)(&mut samples);
        let evaluation = alarm.evaluate(&samples, 0..HOURS * 60);
        // The runbook's window: evaluated once the period holding the minute is complete.
        let period = runbook[incident.alarm].period_minutes;
        let deadline = (incident.met_in / period + 1) * period;
        let pages = evaluation.alarms();
        let what = format!("{} ({})", incident.alarm, incident.what);
        match pages.first() {
            None => failures.push(format!("{what}: never fires")),
            Some(&first) if first > deadline => failures.push(format!(
                "{what}: fires at minute {first}, the runbook promises by {deadline}"
            )),
            Some(&first) if first <= incident.met_in => failures.push(format!(
                "{what}: fires at minute {first}, before the incident"
            )),
            Some(_) if pages.len() > 1 => failures.push(format!(
                "{what}: pages {} times (minutes {pages:?}), not once per incident",
                pages.len()
            )),
            Some(_) => match incident.cleared_by {
                Some(by) if evaluation.state_at(by) != State::Ok => {
                    failures.push(format!("{what}: not OK again by minute {by}"))
                }
                _ => {}
            },
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
