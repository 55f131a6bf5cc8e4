//! Figures the docs state in prose agree with the code, or with the table beside them: the
//! shard size, one DynamoDB write price, the dispatcher's RCU per call, the gateway timeout.

use std::path::PathBuf;

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

#[test]
fn two_shards_start_past_one_shards_calls() {
    let per_shard = f64::from(koe::domain::due::CALLS_PER_SHARD);
    let mut problems = Vec::new();
    for (file, text) in flowing() {
        for (at, _) in text.match_indices("i.e. over ") {
            let before = &text[text[..at]
                .char_indices()
                .rev()
                .nth(80)
                .map_or(0, |(i, _)| i)..at];
            if !before.contains("shards") {
                continue;
            }
            for n in numbers_after(&text[at..], "i.e. over ").into_iter().take(1) {
                if n != per_shard {
                    problems.push(format!(
                        "{}: \"...{before}i.e. over {n}\": a second shard starts past \
                         {per_shard} calls (`CALLS_PER_SHARD`), not {n}",
                        file.display()
                    ));
                }
            }
        }
    }
    report("shard sizes", &problems);
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
