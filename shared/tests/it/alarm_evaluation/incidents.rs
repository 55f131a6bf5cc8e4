//! Incidents per row of the runbook, written as what the code then reports (a run's report, a
//! request's status).

use koe::dispatch::RunReport;
use koe_testkit::cloudwatch::Samples;

use super::HOURS;
use super::published::{
    api, apns_config_incomplete, confirm, confirmations, coordinator_run, dead_letters,
    dead_tokens, dynamodb, gateway, lambda, minute_over_capacity, on_time, part_run, quiet,
    remove_runs, replace_run, requests, sending,
};

/// The stack an incident happens on.
#[derive(Clone, Copy, Debug)]
pub enum Stack {
    Healthy,
    /// Only the dispatcher's idle runs: no count, no request, for hours.
    Idle,
}

pub struct Incident {
    pub alarm: &'static str,
    pub on: Stack,
    pub what: &'static str,
    /// The minute in which the runbook's condition is met.
    pub met_in: u32,
    /// A minute by which it is over and the alarm is OK again (none: it lasts to the end).
    pub cleared_by: Option<u32>,
    pub inject: fn(&mut Samples),
}

fn every_other_minute(from: u32, to: u32) -> impl Iterator<Item = u32> {
    (from..to).step_by(2)
}

/// The healthy coordinator's run of `minute`, changed by `change`, as it reports instead.
fn coordinator(samples: &mut Samples, minute: u32, change: fn(&mut RunReport)) {
    let mut run = coordinator_run(minute);
    change(&mut run);
    replace_run(samples, "dispatch", minute, &run);
}

/// A part's run in `minute` (the healthy stack's, or one more), changed by `change`.
fn part(samples: &mut Samples, minute: u32, change: fn(&mut RunReport)) {
    let mut run = part_run(minute).unwrap_or_else(|| quiet(minute));
    change(&mut run);
    replace_run(samples, "dispatch-part", minute, &run);
}

/// An idle stack's run of `minute`, changed by `change`.
fn idle_run(samples: &mut Samples, minute: u32, change: fn(&mut RunReport)) {
    let mut run = quiet(minute);
    change(&mut run);
    replace_run(samples, "dispatch", minute, &run);
}

/// `function`'s runs of `minutes`, each sending `punctual` pushes on time and the `late` ones
/// (lateness in ms).
fn late_pushes(
    samples: &mut Samples,
    function: &str,
    minutes: [u32; 2],
    punctual: u32,
    late: &[i64],
) {
    for minute in minutes {
        let mut pushes = on_time(punctual, minute);
        pushes.extend(late);
        replace_run(samples, function, minute, &sending(minute, pushes));
    }
}

/// `api` answers `count` requests 5xx in each of `minutes`.
fn gateway_5xx(samples: &mut Samples, api: &str, minutes: std::ops::Range<u32>, count: f64) {
    for minute in minutes {
        samples.put(&gateway("5xx", api), minute, count);
    }
}

pub fn missed(run: &mut RunReport) {
    run.selected += 1;
    run.missed += 1;
}

/// A call failed by APNs, a fault of ours: 500 after the push budget's retries.
pub fn apns_5xx(run: &mut RunReport) {
    run.selected += 1;
    run.claimed += 1;
    run.failed += 1;
    *run.apns_errors
        .entry("InternalServerError".into())
        .or_default() += 1;
}

pub fn push_unknown(run: &mut RunReport) {
    run.selected += 1;
    run.claimed += 1;
    run.failed += 1;
    run.push_unknown += 1;
    run.apns_errors.insert("NoAnswer".into(), 1);
}

pub fn incidents() -> Vec<Incident> {
    use Stack::{Healthy, Idle};
    vec![
        Incident {
            alarm: "dispatch-missed",
            on: Healthy,
            what: "one missed call in minute 67 of an otherwise quiet hour",
            met_in: 67,
            cleared_by: Some(80),
            inject: |s| coordinator(s, 67, missed),
        },
        Incident {
            alarm: "dispatch-missed",
            on: Healthy,
            what: "a part records a missed call every other minute for 20 minutes",
            met_in: 100,
            cleared_by: Some(130),
            inject: |s| every_other_minute(100, 120).for_each(|m| part(s, m, missed)),
        },
        Incident {
            alarm: "dispatch-missed",
            on: Idle,
            what: "after hours of idle runs (no Missed published at all), one missed call in \
                   minute 300",
            met_in: 300,
            cleared_by: Some(315),
            inject: |s| idle_run(s, 300, missed),
        },
        Incident {
            alarm: "dispatch-failed",
            on: Healthy,
            what: "one call failed by APNs 500 in minute 7",
            met_in: 7,
            cleared_by: Some(20),
            inject: |s| coordinator(s, 7, apns_5xx),
        },
        Incident {
            alarm: "dispatch-failed",
            on: Healthy,
            what: "one call failed by APNs 500 every other minute for 20 minutes, by the \
                   coordinator and a part in turn",
            met_in: 40,
            cleared_by: Some(70),
            inject: |s| {
                for minute in every_other_minute(40, 60) {
                    match minute % 4 {
                        0 => coordinator(s, minute, apns_5xx),
                        _ => part(s, minute, apns_5xx),
                    }
                }
            },
        },
        Incident {
            alarm: "dispatch-failed",
            on: Idle,
            what: "after hours of idle runs, one call failed by APNs 500 in minute 250",
            met_in: 250,
            cleared_by: Some(265),
            inject: |s| idle_run(s, 250, apns_5xx),
        },
        Incident {
            alarm: "dispatch-failed",
            on: Healthy,
            what: "a part's call fails by APNs 503 in minute 90, amid 12 dead tokens",
            met_in: 90,
            cleared_by: Some(105),
            inject: |s| {
                part(s, 90, |run| {
                    dead_tokens(run, 12);
                    apns_5xx(run);
                })
            },
        },
        Incident {
            alarm: "dispatch-dead-tokens",
            on: Healthy,
            what: "an app release breaks its tokens: 6 dead tokens a minute (a third of the \
                   pushes), minutes 150 to 154, in the coordinator and the parts",
            met_in: 154,
            cleared_by: Some(165),
            inject: |s| {
                for minute in 150..155 {
                    coordinator(s, minute, |run| dead_tokens(run, 3));
                    part(s, minute, |run| dead_tokens(run, 3));
                }
            },
        },
        Incident {
            alarm: "dispatch-dead-tokens",
            on: Idle,
            what: "after hours of idle runs, 25 calls of minute 242 all meet dead tokens (the \
                   APNs environment wrong for a fleet)",
            met_in: 242,
            cleared_by: Some(255),
            inject: |s| idle_run(s, 242, |run| dead_tokens(run, 25)),
        },
        Incident {
            alarm: "dispatch-push-unknown",
            on: Healthy,
            what: "one push in an unknown state (recorded failed too) in a part, minute 7",
            met_in: 7,
            cleared_by: Some(20),
            inject: |s| part(s, 7, push_unknown),
        },
        Incident {
            alarm: "dispatch-push-unknown",
            on: Healthy,
            what: "one push in an unknown state every other minute for 20 minutes",
            met_in: 200,
            cleared_by: Some(230),
            inject: |s| every_other_minute(200, 220).for_each(|m| coordinator(s, m, push_unknown)),
        },
        Incident {
            alarm: "dispatch-lateness",
            on: Healthy,
            what: "the coordinator's p99 over 1 s in minutes 40 and 42 (2 of 3)",
            met_in: 42,
            cleared_by: Some(50),
            inject: |s| late_pushes(s, "dispatch", [40, 42], 97, &[1500; 3]),
        },
        Incident {
            alarm: "dispatch-lateness",
            on: Healthy,
            what: "the parts' p99 over 1 s in minutes 150 and 151",
            met_in: 151,
            cleared_by: Some(160),
            inject: |s| late_pushes(s, "dispatch-part", [150, 151], 48, &[1200; 2]),
        },
        Incident {
            alarm: "dispatch-silent",
            on: Healthy,
            what: "no dispatch run finishes from minute 30 to 49 (no record at all)",
            met_in: 32,
            cleared_by: Some(55),
            inject: |s| remove_runs(s, "dispatch", 30..50),
        },
        Incident {
            alarm: "dispatch-silent",
            on: Idle,
            what: "an idle stack's runs stop from minute 200 to 219",
            met_in: 202,
            cleared_by: Some(225),
            inject: |s| remove_runs(s, "dispatch", 200..220),
        },
        Incident {
            alarm: "dispatch-errors",
            on: Healthy,
            what: "one dispatch invocation fails in minute 12",
            met_in: 12,
            cleared_by: Some(25),
            inject: |s| s.put(&lambda("Errors", "dispatch"), 12, 1.0),
        },
        Incident {
            alarm: "dispatch-part-errors",
            on: Healthy,
            what: "one part fails in minute 90",
            met_in: 90,
            cleared_by: Some(105),
            inject: |s| s.put(&lambda("Errors", "dispatch-part"), 90, 1.0),
        },
        Incident {
            alarm: "dispatch-throttles",
            on: Healthy,
            what: "one dispatch invocation throttled in minute 12",
            met_in: 12,
            cleared_by: Some(25),
            inject: |s| s.put(&lambda("Throttles", "dispatch"), 12, 1.0),
        },
        Incident {
            alarm: "dispatch-part-throttles",
            on: Healthy,
            what: "one part throttled in minute 90",
            met_in: 90,
            cleared_by: Some(105),
            inject: |s| s.put(&lambda("Throttles", "dispatch-part"), 90, 1.0),
        },
        Incident {
            alarm: "calls-unconfirmed",
            on: Healthy,
            what: "iOS stopped waking the app: 30% of 100 confirming calls in 5 minutes \
                   (minutes 135 to 139) end unconfirmed",
            met_in: 139,
            cleared_by: Some(150),
            inject: |s| confirming_window(s, 135, 70, 30),
        },
        Incident {
            alarm: "calls-unconfirmed",
            on: Healthy,
            what: "the confirmations fail for an hour: every confirming call from minute 200 \
                   ends unconfirmed, in the coordinator and the parts",
            met_in: 204,
            cleared_by: Some(270),
            inject: |s| {
                for window in (200..260).step_by(5) {
                    confirming_window(s, window, 0, 25);
                }
            },
        },
        Incident {
            alarm: "chat-api-5xx",
            on: Healthy,
            what: "the chat API answers 3 of its 30 requests a minute 5xx, minutes 150 to 154",
            met_in: 154,
            cleared_by: Some(165),
            inject: |s| gateway_5xx(s, "ChatApi", 150..155, 3.0),
        },
        Incident {
            alarm: "chat-api-5xx",
            on: Healthy,
            what: "the streamed chat answers 4 more requests a minute, all 5xx, minutes 150 to 154",
            met_in: 154,
            cleared_by: Some(165),
            inject: |s| {
                for minute in 150..155 {
                    requests(s, "chat-stream", minute, &[(30, 500); 4]);
                }
            },
        },
        Incident {
            alarm: "chat-api-5xx",
            on: Idle,
            what: "after hours without a request, the streamed chat answers its 6 requests of \
                   minute 242 with 5xx (no ServerErrors published before)",
            met_in: 242,
            cleared_by: Some(255),
            inject: |s| requests(s, "chat-stream", 242, &[(25, 502); 6]),
        },
        Incident {
            alarm: "agent-api-5xx",
            on: Healthy,
            what: "the agent API answers 2 of its 10 requests a minute 5xx, minutes 200 to 204",
            met_in: 204,
            cleared_by: Some(215),
            inject: |s| gateway_5xx(s, "AgentApi", 200..205, 2.0),
        },
        Incident {
            alarm: "chat-spend-80",
            on: Healthy,
            what: "a quiet evening over 80%: one chat call every 20 minutes from minute 120, \
                   the day turning at minute 200",
            met_in: 120,
            cleared_by: Some(205),
            inject: |s| spend_over_80(s, &["chat", "chat-stream"]),
        },
        Incident {
            alarm: "chat-spend-80",
            on: Healthy,
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
            on: Healthy,
            what: "a quiet evening over 80%: one agent call every 20 minutes from minute 120",
            met_in: 120,
            cleared_by: Some(205),
            inject: |s| spend_over_80(s, &["agent"]),
        },
        Incident {
            alarm: "notifications-undelivered",
            on: Healthy,
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
        Incident {
            alarm: "dispatch-apns-config",
            on: Idle,
            what: "the APNs key is stored before its ids: a dispatch container starts in minute \
                   120 and logs its pushes",
            met_in: 120,
            cleared_by: Some(135),
            inject: |s| apns_config_incomplete(s, "dispatch", 120),
        },
        Incident {
            alarm: "dispatch-apns-config",
            on: Healthy,
            what: "a part's container starts with the ids missing in minute 200",
            met_in: 200,
            cleared_by: Some(215),
            inject: |s| apns_config_incomplete(s, "dispatch-part", 200),
        },
        Incident {
            alarm: "dispatch-minute-over-capacity",
            on: Idle,
            what: "a create in minute 47 takes a minute of the next morning past the budget",
            met_in: 47,
            cleared_by: Some(65),
            inject: |s| minute_over_capacity(s, 47),
        },
        Incident {
            alarm: "calls-table-throttles",
            on: Healthy,
            what: "the calls table throttles 3 writes in minute 30",
            met_in: 30,
            cleared_by: Some(45),
            inject: |s| {
                s.put(
                    &dynamodb("WriteThrottleEvents", "CallsTable", None),
                    30,
                    3.0,
                )
            },
        },
        Incident {
            alarm: "calls-table-throttles",
            on: Healthy,
            what: "the calls table throttles a read in minute 30",
            met_in: 30,
            cleared_by: Some(45),
            inject: |s| s.put(&dynamodb("ReadThrottleEvents", "CallsTable", None), 30, 1.0),
        },
        Incident {
            alarm: "calls-index-throttles",
            on: Healthy,
            what: "the due index throttles writes in minutes 30 and 31",
            met_in: 30,
            cleared_by: Some(45),
            inject: |s| {
                let index = dynamodb("WriteThrottleEvents", "CallsTable", Some("byDueShard"));
                s.put(&index, 30, 40.0);
                s.put(&index, 31, 12.0);
            },
        },
        Incident {
            alarm: "calls-index-throttles",
            on: Idle,
            what: "the due index throttles a query in minute 30",
            met_in: 30,
            cleared_by: Some(45),
            inject: |s| {
                let index = dynamodb("ReadThrottleEvents", "CallsTable", Some("byDueShard"));
                s.put(&index, 30, 1.0);
            },
        },
        Incident {
            alarm: "devices-table-throttles",
            on: Healthy,
            what: "the devices table throttles reads in minute 30",
            met_in: 30,
            cleared_by: Some(45),
            inject: |s| {
                s.put(
                    &dynamodb("ReadThrottleEvents", "DevicesTable", None),
                    30,
                    5.0,
                )
            },
        },
        Incident {
            alarm: "devices-table-throttles",
            on: Healthy,
            what: "the devices table throttles a write in minute 30",
            met_in: 30,
            cleared_by: Some(45),
            inject: |s| {
                s.put(
                    &dynamodb("WriteThrottleEvents", "DevicesTable", None),
                    30,
                    1.0,
                )
            },
        },
        Incident {
            alarm: "usage-table-throttles",
            on: Healthy,
            what: "the agent-usage table throttles a write in minute 30",
            met_in: 30,
            cleared_by: Some(45),
            inject: |s| {
                s.put(
                    &dynamodb("WriteThrottleEvents", "AgentUsageTable", None),
                    30,
                    1.0,
                );
            },
        },
        Incident {
            alarm: "usage-table-throttles",
            on: Healthy,
            what: "the agent-usage table throttles a read in minute 30",
            met_in: 30,
            cleared_by: Some(45),
            inject: |s| {
                s.put(
                    &dynamodb("ReadThrottleEvents", "AgentUsageTable", None),
                    30,
                    1.0,
                )
            },
        },
    ]
}

/// The calls-unconfirmed alarm's period, in minutes.
const CONFIRMING_WINDOW: u32 = 5;

/// The confirming devices' calls of the 5 minutes from `from` (a period of the
/// calls-unconfirmed alarm) replaced by `confirmed` confirmed and `unconfirmed` unconfirmed
/// calls, spread over its minutes; the unconfirmed ones alternate between the coordinator's run
/// and a part's.
pub fn confirming_window(samples: &mut Samples, from: u32, confirmed: u32, unconfirmed: u32) {
    let minutes = from..from + CONFIRMING_WINDOW;
    samples.remove(&confirm("Confirmed"), minutes.clone());
    samples.remove(&confirm("ConfirmLatency"), minutes.clone());
    for i in 0..confirmed {
        confirmations(samples, from + i % CONFIRMING_WINDOW, 1);
    }
    for minute in minutes {
        let in_minute = |part: u32| {
            (0..unconfirmed)
                .filter(|i| from + i % CONFIRMING_WINDOW == minute && i % 2 == part)
                .count() as u32
        };
        let mut run = coordinator_run(minute);
        run.unconfirmed = in_minute(0);
        replace_run(samples, "dispatch", minute, &run);
        if in_minute(1) > 0 {
            let mut run = part_run(minute).unwrap_or_else(|| quiet(minute));
            run.unconfirmed = in_minute(1);
            replace_run(samples, "dispatch-part", minute, &run);
        }
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
