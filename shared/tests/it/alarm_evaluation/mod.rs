//! The template's alarms do what the runbook says: every alarm of `template.yaml` is a row of the
//! alarm table of `docs/operations.md` with the same threshold and window, each row's incidents
//! (per-minute metric data as the stack publishes it: the code's own records, `published`) put
//! that alarm in ALARM within the window the row states, once, on a healthy stack and after
//! hours of an idle one; and neither a healthy nor an idle stack puts any in ALARM over hours.
//! The alarms run on `koe_testkit::cloudwatch`, a model of CloudWatch's evaluation (M of N,
//! missing data, metric math).

mod incidents;
mod published;

use std::collections::{BTreeMap, BTreeSet};

use koe::dispatch::RunReport;
use koe_testkit::cloudwatch::{Alarm, Comparison, MetricId, Samples, State, alarm_from_properties};
use serde_norway::Value;

use incidents::{Stack, confirming_window, incidents};
use published::{dead_tokens, on_time, quiet, replace_run, sending};

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
    let section = koe_testkit::template::doc_section("operations.md", "Alarms and what to do");
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
// Stacks without an incident.

const HOURS: u32 = 6;

/// No alarm of the template fires on `samples` in all of [`HOURS`]; `what` names them.
fn pages_no_one(samples: &Samples, what: &str) {
    for (name, alarm) in template_alarms() {
        let evaluation = alarm.evaluate(samples, 0..HOURS * 60);
        assert_eq!(
            evaluation.alarms(),
            Vec::<u32>::new(),
            "{name} fired on {what}"
        );
    }
}

#[test]
fn a_healthy_stack_pages_no_one_for_hours() {
    let samples = published::healthy(HOURS);
    pages_no_one(&samples, "a healthy stack");
}

#[test]
fn an_idle_stack_publishes_one_metric_of_its_own_and_pages_no_one() {
    let samples = published::idle(HOURS);
    let ours: Vec<&MetricId> = samples
        .metrics()
        .into_iter()
        .filter(|m| m.namespace.starts_with("Koe/"))
        .collect();
    assert_eq!(
        ours,
        [&published::dispatch("RunDuration", "dispatch")],
        "an idle run writes its duration only"
    );
    pages_no_one(&samples, "an idle stack");
}

// ---------------------------------------------------------------------------------------------
// One key holder.

/// The run of `minute` on `on` when one key holder also calls: `dead` devices whose tokens are
/// dead in each 5 minutes (each fails its call, its token removed, and is registered again), and
/// one phone that never confirms, called again as soon as each call ends (a reservation at
/// least 10 s ahead, 3 pushes 5 s apart, the last wait: one call every 25 s).
fn key_holder_run(on: Stack, minute: u32, dead: u32) -> RunReport {
    let mut run = match on {
        Stack::Healthy => published::coordinator_run(minute),
        Stack::Idle => quiet(minute),
    };
    if minute % 5 == 2 {
        dead_tokens(&mut run, dead);
    }
    let calls = (minute + 1) * 60 / 25 - minute * 60 / 25;
    run.selected += calls;
    run.claimed += 3 * calls;
    run.sent += 3 * calls;
    run.re_pushed += 2 * calls;
    run.unconfirmed += calls;
    run.lateness_ms.extend(on_time(3 * calls, minute));
    run
}

/// A fault of ours, as a run reports it.
type Fault = fn(&mut RunReport);

/// Every run of the stack's hours with the key holder's calls.
fn with_key_holder(samples: &mut Samples, on: Stack, dead: u32) {
    for minute in 0..HOURS * 60 {
        replace_run(
            samples,
            "dispatch",
            minute,
            &key_holder_run(on, minute, dead),
        );
    }
}

/// SPEC: what a client or its phone causes pages on a rate with a floor, what is ours on its
/// first occurrence. One key holder (its dead devices, up to 18 in each 5 minutes besides the
/// stack's own, and a phone that never confirms, for hours) pages no one, on a busy or an idle
/// stack; one failure of ours among them still pages.
#[test]
fn one_key_holder_cannot_page() {
    let alarms = template_alarms();
    let mut failures = Vec::new();
    for on in [Stack::Healthy, Stack::Idle] {
        for dead in [1, 5, 18] {
            let mut samples = stack(on);
            with_key_holder(&mut samples, on, dead);
            for (name, alarm) in &alarms {
                let pages = alarm.evaluate(&samples, 0..HOURS * 60).alarms();
                if !pages.is_empty() {
                    failures.push(format!(
                        "{name} fired on one key holder (dead devices: {dead} in each 5 minutes, \
                         and a phone that never confirms, {on:?} stack) at minutes {pages:?}"
                    ));
                }
            }
            let ours: [(&str, &str, Fault); 3] = [
                (
                    "dispatch-failed",
                    "a call failed by APNs 500",
                    incidents::apns_5xx,
                ),
                (
                    "dispatch-push-unknown",
                    "a push in an unknown state",
                    incidents::push_unknown,
                ),
                ("dispatch-missed", "a missed call", incidents::missed),
            ];
            for (name, what, ours) in ours {
                let mut samples = samples.clone();
                let mut run = key_holder_run(on, 212, dead);
                ours(&mut run);
                replace_run(&mut samples, "dispatch", 212, &run);
                let pages = alarms[name].evaluate(&samples, 0..HOURS * 60).alarms();
                if pages != [213] {
                    failures.push(format!(
                        "{name}: {what} in minute 212 amid one key holder's calls ({dead} dead, \
                         {on:?} stack): pages at minutes {pages:?}, not once at 213"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Incidents, per row of the runbook (`incidents`).

/// The stack an incident happens on, before it.
fn stack(on: Stack) -> Samples {
    match on {
        Stack::Healthy => published::healthy(HOURS),
        Stack::Idle => published::idle(HOURS),
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
            what: "2 of 100 confirming calls in 5 minutes end unconfirmed (2%)",
            inject: |s| confirming_window(s, 180, 98, 2),
        },
        NearMiss {
            alarm: "calls-unconfirmed",
            what: "19 of 19 confirming calls in 5 quiet minutes end unconfirmed: fewer than 20",
            inject: |s| confirming_window(s, 75, 0, 19),
        },
        NearMiss {
            alarm: "calls-unconfirmed",
            what: "10% exactly: 20 of 200 confirming calls in 5 minutes end unconfirmed",
            inject: |s| confirming_window(s, 240, 180, 20),
        },
        NearMiss {
            alarm: "dispatch-dead-tokens",
            what: "19 dead tokens in 5 quiet minutes (all the pushes): fewer than 20",
            inject: |s| {
                for minute in 80..85 {
                    let mut run = quiet(minute);
                    dead_tokens(&mut run, if minute == 80 { 15 } else { 1 });
                    replace_run(s, "dispatch", minute, &run);
                }
            },
        },
        NearMiss {
            alarm: "dispatch-dead-tokens",
            what: "5% exactly: 20 dead tokens of 400 pushes in 5 minutes",
            inject: |s| {
                for minute in 155..160 {
                    let mut run = sending(minute, on_time(76, minute));
                    dead_tokens(&mut run, 4);
                    replace_run(s, "dispatch", minute, &run);
                }
            },
        },
    ]
}

#[test]
fn a_near_miss_pages_no_one() {
    let alarms = template_alarms();
    let mut failures = Vec::new();
    for near_miss in near_misses() {
        let alarm = &alarms[near_miss.alarm];
        let mut samples = published::healthy(HOURS);
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
    // Each metric an alarm reads, fed by one of its incidents at least: the model's names are
    // the template's.
    let mut fed: BTreeMap<&str, BTreeSet<MetricId>> = BTreeMap::new();
    for incident in &incidents {
        let alarm = &alarms[incident.alarm];
        let mut samples = stack(incident.on);
        (incident.inject)(&mut samples);
        fed.entry(incident.alarm)
            .or_default()
            .extend(samples.metrics().into_iter().cloned());
        let evaluation = alarm.evaluate(&samples, 0..HOURS * 60);
        // The runbook's window: evaluated once the period holding the minute is complete.
        let period = runbook[incident.alarm].period_minutes;
        let deadline = (incident.met_in / period + 1) * period;
        let pages = evaluation.alarms();
        let what = format!("{} ({:?}: {})", incident.alarm, incident.on, incident.what);
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
    for (name, alarm) in &alarms {
        for stat in alarm.metric_stats() {
            if !fed[name.as_str()].contains(&stat.metric) {
                failures.push(format!("{name}: no incident publishes {}", stat.metric));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
