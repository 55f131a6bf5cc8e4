//! Figures the docs state in prose agree with the code, or with the table beside them: every
//! figure of [`figures`] wherever a page states it (each stated at least once), one DynamoDB
//! write price, the dispatcher's RCU per call, the gateway timeout.

use std::path::PathBuf;

use koe::platform::config::{ApnsPoolConfig, Config, Vars};

use koe_testkit::template::repo_root;

use super::{markdown, report};

/// The numbers in `text` right after each `prefix` (`"over "` in "over 400 calls" → 400),
/// commas dropped.
fn numbers_after(text: &str, prefix: &str) -> Vec<f64> {
    text.split(prefix)
        .skip(1)
        .filter_map(|rest| {
            let digits: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '.')
                .filter(|c| *c != ',')
                .collect();
            digits.trim_end_matches('.').parse().ok()
        })
        .collect()
}

/// Each page's text with whitespace runs (line breaks too) made one space.
fn flowing() -> Vec<(PathBuf, String)> {
    markdown()
        .into_iter()
        .map(|(file, text)| (file, text.split_whitespace().collect::<Vec<_>>().join(" ")))
        .collect()
}

/// The prices of DynamoDB writes a text states: each "$P per million" whose next words name
/// writes, or whose preceding words do when the next ones name nothing read.
fn write_prices(text: &str) -> Vec<String> {
    let mut prices = Vec::new();
    for (at, _) in text.match_indices(" per million") {
        let Some(dollar) = text[..at].rfind('$') else {
            continue;
        };
        let price = &text[dollar + 1..at];
        if price.is_empty() || !price.chars().all(|c| c.is_ascii_digit() || c == '.') {
            continue;
        }
        let after: String = text[at + 12..].chars().take(25).collect();
        let before: String = text[..dollar].chars().rev().take(60).collect::<String>();
        let before: String = before.chars().rev().collect();
        let writes = after.contains("write")
            || (!after.contains("read") && !after.contains("call") && before.contains("write"));
        if writes {
            prices.push(price.to_owned());
        }
    }
    prices
}

/// A figure the code defines, the value the code gives it (in the unit of its phrases), and the
/// phrases that state it: `{}` stands for the number (commas allowed), the rest is matched as is
/// over text whose whitespace runs are one space.
struct Figure {
    name: &'static str,
    value: f64,
    phrases: &'static [&'static str],
}

/// Every figure the docs state in prose that the code defines: constants, and the
/// configuration's defaults (`Config::from_vars` with no variable set). A new statement of one of
/// these in another wording needs its phrase here (docs/testing.md points here).
fn figures() -> Vec<Figure> {
    use koe::dispatch::{self, plan, wake};
    let config = Config::from_vars(&Vars::from_pairs(&[])).unwrap();
    let d = &config.dispatch;
    let apns = ApnsPoolConfig::from_vars(&Vars::from_pairs(&[])).unwrap();
    let due = |n: u32| f64::from(n);
    let secs = |t: std::time::Duration| t.as_secs_f64();
    let chrono_secs = |t: chrono::Duration| t.num_milliseconds() as f64 / 1000.0;
    vec![
        Figure {
            name: "CALLS_PER_SHARD",
            value: due(koe::domain::due::CALLS_PER_SHARD),
            phrases: &[
                "one shard per {} reservations",
                "one shard per {} calls",
                "i.e. over {} calls",
                "one create in {}",
                "1 create in {}",
                "count raise in {}",
                "the count raise, 1/{}",
                "one write per {} creates",
                "a shard of {} entries",
            ],
        },
        Figure {
            name: "MAX_CALLS_PER_MINUTE",
            value: due(koe::domain::due::MAX_CALLS_PER_MINUTE),
            phrases: &["min(n, {})", "stop growing at {} calls"],
        },
        Figure {
            name: "MAX_SHARDS",
            value: due(koe::domain::due::MAX_SHARDS),
            phrases: &["{} (`MAX_SHARDS`)", "at most {} shards", "the {} shards"],
        },
        Figure {
            name: "grace (DISPATCH_GRACE_SECS), s",
            value: secs(d.grace),
            phrases: &["`DISPATCH_GRACE_SECS` ({} s)"],
        },
        Figure {
            name: "claim timeout (DISPATCH_CLAIM_TIMEOUT_SECS), s",
            value: secs(d.claim_timeout),
            phrases: &[
                "`DISPATCH_CLAIM_TIMEOUT_SECS` ({} s)",
                "the {} s claim timeout",
            ],
        },
        Figure {
            name: "the run window, s",
            value: secs(d.window),
            phrases: &["before its start + {} s"],
        },
        Figure {
            name: "the run window's overlap of the next minute, s",
            value: secs(d.window) - 60.0,
            phrases: &["the next run plus {} s of overlap"],
        },
        Figure {
            name: "MISSED_LOOKBACK, minutes",
            value: dispatch::MISSED_LOOKBACK.num_minutes() as f64,
            phrases: &["grace + {} minutes back"],
        },
        Figure {
            name: "SWEEP_PER_RUN, minutes",
            value: dispatch::SWEEP_PER_RUN.num_minutes() as f64,
            phrases: &["at most {} (`SWEEP_PER_RUN`)"],
        },
        Figure {
            name: "SELECTION_QUERIES_IN_FLIGHT",
            value: dispatch::SELECTION_QUERIES_IN_FLIGHT as f64,
            phrases: &[
                "at most {} counts and queries",
                "at most {} selection requests in flight",
                "with {} requests in flight",
            ],
        },
        Figure {
            name: "DISPATCH_CALLS_PER_WORKER",
            value: due(d.calls_per_worker),
            phrases: &[
                "`DISPATCH_CALLS_PER_WORKER` ({})",
                "`DispatchCallsPerWorker` ({})",
                "ceil(calls / {})",
            ],
        },
        Figure {
            name: "DISPATCH_MAX_WORKERS",
            value: due(d.max_workers),
            phrases: &["`DISPATCH_MAX_WORKERS`, {}", "`DispatchMaxWorkers` ({})"],
        },
        Figure {
            name: "DISPATCH_CONCURRENCY",
            value: d.concurrency as f64,
            phrases: &["`DISPATCH_CONCURRENCY` ({})"],
        },
        Figure {
            name: "APNS_MAX_CONNECTIONS",
            value: apns.max_connections as f64,
            phrases: &["`APNS_MAX_CONNECTIONS` ({})"],
        },
        Figure {
            name: "CALL_CONFIRM_WAIT_MS, s",
            value: secs(d.confirm_wait),
            phrases: &["`CALL_CONFIRM_WAIT_MS` ({} s)"],
        },
        Figure {
            name: "CALL_MAX_PUSHES",
            value: due(d.max_pushes),
            phrases: &["`CALL_MAX_PUSHES` ({})"],
        },
        Figure {
            name: "LONGEST_LEAD, s",
            value: chrono_secs(plan::LONGEST_LEAD),
            phrases: &[
                "at most {} s before the second",
                "up to {} s before the second",
                "up to {} s before in a crowded one",
            ],
        },
        Figure {
            name: "LONGEST_LAG, s",
            value: chrono_secs(plan::LONGEST_LAG),
            phrases: &[
                "at most {} s after",
                "up to {} s after the push",
                "outcomes up to {} s after",
                "the outcomes' {} s spare",
                "up to {} s in a crowded second",
            ],
        },
        Figure {
            name: "FINISH_BUDGET, s",
            value: secs(dispatch::FINISH_BUDGET),
            phrases: &["{} s (`FINISH_BUDGET`)"],
        },
        Figure {
            name: "RESOLVE_BUDGET, s",
            value: secs(dispatch::RESOLVE_BUDGET),
            phrases: &["{} s (`RESOLVE_BUDGET`)", "the {} s `RESOLVE_BUDGET`"],
        },
        Figure {
            name: "SCHEDULE_SLACK, s",
            value: chrono_secs(wake::SCHEDULE_SLACK),
            phrases: &["`SCHEDULE_SLACK`, {} s"],
        },
        Figure {
            name: "INDEX_LAG, s",
            value: chrono_secs(wake::INDEX_LAG),
            phrases: &["from {} s after the create"],
        },
        Figure {
            name: "LONGEST_WAKE, s",
            value: secs(wake::LONGEST_WAKE),
            phrases: &["`LONGEST_WAKE`, {} s"],
        },
        Figure {
            name: "NOTICE_BUDGET, s",
            value: secs(dispatch::notice::NOTICE_BUDGET),
            phrases: &["`NOTICE_BUDGET` ({} s)"],
        },
        Figure {
            name: "DISPATCH_ATTEMPT_TIMEOUT, ms",
            value: koe::store::dynamodb::DISPATCH_ATTEMPT_TIMEOUT.as_millis() as f64,
            phrases: &["{} ms (`DISPATCH_ATTEMPT_TIMEOUT`)"],
        },
        Figure {
            name: "MARGIN, s",
            value: secs(koe::platform::deadline::MARGIN),
            phrases: &["{} s before it (`MARGIN`)"],
        },
        Figure {
            name: "ANSWER_RESERVE, s",
            value: secs(koe::platform::deadline::ANSWER_RESERVE),
            phrases: &["{} s before that (`ANSWER_RESERVE`"],
        },
        Figure {
            name: "AGENT_DAILY_LIMIT",
            value: f64::from(config.agent.daily_limit),
            phrases: &["`AGENT_DAILY_LIMIT` ({})"],
        },
    ]
}

/// The number at the start of `text` (`1,400` → 1400, `0.5` → 0.5), if any.
fn leading_number(text: &str) -> Option<f64> {
    let digits: String = text
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '.')
        .collect();
    let digits = digits.trim_end_matches(['.', ',']);
    digits.replace(',', "").parse().ok()
}

/// The number at the end of `text`, if any.
fn trailing_number(text: &str) -> Option<f64> {
    let start = text
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_digit() || *c == ',' || *c == '.')
        .last()
        .map(|(i, _)| i)?;
    leading_number(text[start..].trim_start_matches([',', '.']))
}

/// The numbers `text` states in `phrase` (case-insensitive): after its part before `{}` when
/// that part is not empty (and only where its part after follows), else before its part after.
fn stated(text: &str, phrase: &str) -> Vec<f64> {
    let lower = text.to_lowercase();
    let (before, after) = phrase.split_once("{}").expect("a phrase has {}");
    let (before, after) = (before.to_lowercase(), after.to_lowercase());
    if before.is_empty() {
        return lower
            .match_indices(&after)
            .filter_map(|(at, _)| trailing_number(&lower[..at]))
            .collect();
    }
    lower
        .match_indices(&before)
        .filter_map(|(at, _)| {
            let rest = &lower[at + before.len()..];
            let number = leading_number(rest)?;
            let len = rest
                .find(|c: char| !(c.is_ascii_digit() || c == ',' || c == '.'))
                .unwrap_or(rest.len());
            let len = rest[..len].trim_end_matches(['.', ',']).len();
            rest[len..].starts_with(&after).then_some(number)
        })
        .collect()
}

#[test]
fn every_figure_stated_is_the_codes() {
    let pages = flowing();
    let mut problems = Vec::new();
    for figure in figures() {
        let mut found = 0;
        for (file, text) in &pages {
            for phrase in figure.phrases {
                for number in stated(text, phrase) {
                    found += 1;
                    if number != figure.value {
                        problems.push(format!(
                            "{}: \"{}\" states {number}: the code's {} is {}",
                            file.display(),
                            phrase.replace("{}", &number.to_string()),
                            figure.name,
                            figure.value
                        ));
                    }
                }
            }
        }
        if found == 0 {
            problems.push(format!(
                "{} ({}): no page states it in any of {:?}: a phrase went stale",
                figure.name, figure.value, figure.phrases
            ));
        }
    }
    report("figures in prose that are not the code's", &problems);
}

#[test]
fn one_dynamodb_write_price() {
    let mut stated = Vec::new();
    for (file, text) in flowing() {
        for price in write_prices(&text) {
            stated.push(format!("{}: ${price}", file.display()));
        }
    }
    assert!(
        stated.len() == 1,
        "the price of DynamoDB writes is stated once (scale.md) and linked, here {} times:\n{}",
        stated.len(),
        stated.join("\n")
    );
}

/// The "W / R" cells of the column headed "WCU / RCU per call" in the first table with one.
fn units_per_call(lines: &[&str]) -> Vec<(f64, f64)> {
    let cells = |line: &str| -> Vec<String> {
        line.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_owned())
            .collect()
    };
    let Some(header) = lines
        .iter()
        .position(|l| l.contains("| WCU / RCU per call"))
    else {
        return Vec::new();
    };
    let column = cells(lines[header])
        .iter()
        .position(|c| c == "WCU / RCU per call")
        .unwrap();
    lines[header + 1..]
        .iter()
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let row = cells(l);
            let (w, r) = row.get(column)?.split_once(" / ")?;
            Some((w.parse().ok()?, r.parse().ok()?))
        })
        .collect()
}

#[test]
fn the_dispatchers_units_per_call_are_its_tables() {
    let (_, scale) = markdown()
        .into_iter()
        .find(|(f, _)| f.ends_with("scale.md"))
        .unwrap();
    let lines: Vec<&str> = scale.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("Measured on the limits model:"))
        .expect("scale.md states the measured units per call");
    let prose = format!("{} {}", lines[at], lines[at + 1]);
    let wcu = numbers_after(&prose, "model: ");
    let rcu = numbers_after(&prose, "WCU and ");
    let rcu_to = numbers_after(&prose, " to ");
    let table = units_per_call(&lines[at..]);
    assert!(!table.is_empty(), "no W / R cells after {prose}");
    let min = table.iter().map(|(_, r)| *r).fold(f64::MAX, f64::min);
    let max = table.iter().map(|(_, r)| *r).fold(0.0, f64::max);
    let writes: Vec<f64> = table.iter().map(|(w, _)| *w).collect();
    assert!(
        wcu.first().is_some_and(|w| writes.iter().all(|x| x == w)),
        "scale.md: \"{prose}\": WCU {wcu:?}, the table {writes:?}"
    );
    assert_eq!(
        (rcu.first().copied(), rcu_to.first().copied()),
        (Some(min), Some(max)),
        "scale.md: \"{prose}\": the RCU range, and the table's"
    );
}

#[test]
fn the_gateway_timeout_is_named_with_its_constant() {
    let budget = koe::app::budgets::GATEWAY_TIMEOUT.as_secs();
    let mut problems = Vec::new();
    for (file, text) in markdown() {
        let lines: Vec<&str> = text.lines().collect();
        for (number, line) in lines.iter().enumerate() {
            let budget_named = line.contains(&format!("{budget} s"));
            // The constant on the same line or the next (a sentence may wrap).
            let constant_named = lines[number..]
                .iter()
                .take(2)
                .any(|l| l.contains("GATEWAY_TIMEOUT"));
            if budget_named && line.contains("ateway") && !constant_named {
                problems.push(format!(
                    "{}:{}: {budget} s is koe's budget (`GATEWAY_TIMEOUT`) under API \
                     Gateway's 30 s limit: name it so",
                    file.display(),
                    number + 1
                ));
            }
        }
    }
    report("gateway timeouts", &problems);
}

/// The durations (`5 s`, `120 s`) a text states.
fn durations(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[1].trim_end_matches([',', '.', ')', ':', ';']) == "s")
        .filter(|w| w[0].chars().all(|c| c.is_ascii_digit() || c == '-'))
        .map(|w| format!("{} s", w[0]))
        .collect()
}

#[test]
fn the_templates_header_leaves_timeouts_to_the_functions() {
    let template = std::fs::read_to_string(repo_root().join("template.yaml")).unwrap();
    let header: String = template
        .lines()
        .take_while(|l| !l.starts_with("Parameters:"))
        .filter(|l| l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let stated = durations(&header);
    assert!(
        stated.is_empty(),
        "template.yaml's header states timeouts {stated:?}: each function's `Timeout` is the \
         fact (held to shared/src/app/budgets.rs by time_budgets.rs), the header points to it"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_numbers_of_seconds() {
        let text = "Timeouts: 5 s (at most 2 s), 29-30 s: 120 s. 3 ms, s 4";
        assert_eq!(durations(text), vec!["5 s", "2 s", "29-30 s", "120 s"]);
    }

    #[test]
    fn phrases_find_their_numbers() {
        let text = "One shard per 32 reservations; one shard per 40 calls. Then 10 s (`FINISH_BUDGET`), \
                    and 1,400 per vCPU, at most 0.5 s.";
        assert_eq!(stated(text, "one shard per {} reservations"), vec![32.0]);
        assert_eq!(stated(text, "{} s (`FINISH_BUDGET`)"), vec![10.0]);
        assert_eq!(stated(text, "and {} per vCPU"), vec![1400.0]);
        assert_eq!(stated(text, "at most {} s"), vec![0.5]);
        assert!(stated(text, "one shard per {} minutes").is_empty());
    }

    #[test]
    fn numbers_follow_their_prefix() {
        let text = "2 shards, i.e. over 1,400 calls. Then i.e. over 32. i.e. over x";
        assert_eq!(numbers_after(text, "i.e. over "), vec![1400.0, 32.0]);
    }

    #[test]
    fn write_prices_are_told_from_read_prices() {
        let text = "DynamoDB $0.715 per million write request units, $0.1425 per million read \
                    request units; 2 write units per model call (reserve; $1.25 per million on \
                    demand); about +$1.8 per million calls";
        assert_eq!(write_prices(text), vec!["0.715", "1.25"]);
    }

    #[test]
    fn units_per_call_come_from_the_next_table() {
        let lines = [
            "prose 4.00 WCU",
            "",
            "| a | WRU / RRU per call |",
            "| 0 | 7.00 / 2.00 |",
            "",
            "| a | WCU / RCU per call | b |",
            "| ---: | ---: | ---: |",
            "| 1 | 4.00 / 1.07 | 5.00 / 5.00 |",
            "| 2 | 4.00 / 1.42 | x |",
            "",
            "| 3 | 9.00 / 9.00 |",
        ];
        assert_eq!(units_per_call(&lines), vec![(4.0, 1.07), (4.0, 1.42)]);
    }
}
