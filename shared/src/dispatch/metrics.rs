//! A run's numbers as CloudWatch embedded metric format (EMF) lines: CloudWatch Logs turns each
//! into metrics in the `Koe/Dispatch` namespace (no `PutMetricData` calls, no extra IAM).
//! Metrics: `Claimed`, `Sent`, `Failed`, `PushUnknown` (of `Failed`: pushes that may have left),
//! `Missed`, `Lost`, `StoreErrors` (counts per run) and
//! `PushLateness` (milliseconds after `scheduledAt`, one value per sent push), dimension
//! `Function`.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::RunReport;

pub const NAMESPACE: &str = "Koe/Dispatch";
/// EMF takes at most 100 values per metric per line.
const MAX_VALUES: usize = 100;

/// The EMF lines of one run: counts and the first 100 latenesses on the first line, further
/// latenesses 100 a line.
pub fn emf_lines(report: &RunReport, function: &str, at: DateTime<Utc>) -> Vec<String> {
    let counts = [
        ("Claimed", report.claimed),
        ("Sent", report.sent),
        ("Failed", report.failed),
        ("PushUnknown", report.push_unknown),
        ("Missed", report.missed),
        ("Lost", report.lost),
        ("StoreErrors", report.store_errors),
    ];
    let mut chunks: Vec<&[i64]> = report.lateness_ms.chunks(MAX_VALUES).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, lateness)| {
            let mut metrics: Vec<Value> = Vec::new();
            let mut line = serde_json::Map::new();
            line.insert("Function".into(), json!(function));
            if i == 0 {
                for (name, value) in counts {
                    metrics.push(json!({"Name": name, "Unit": "Count"}));
                    line.insert(name.into(), json!(value));
                }
            }
            if !lateness.is_empty() {
                metrics.push(json!({"Name": "PushLateness", "Unit": "Milliseconds"}));
                line.insert("PushLateness".into(), json!(lateness));
            }
            line.insert(
                "_aws".into(),
                json!({
                    "Timestamp": at.timestamp_millis(),
                    "CloudWatchMetrics": [{
                        "Namespace": NAMESPACE,
                        "Dimensions": [["Function"]],
                        "Metrics": metrics,
                    }],
                }),
            );
            Value::Object(line).to_string()
        })
        .collect()
}

/// Writes the run's EMF lines to stdout when running in a Lambda (where CloudWatch reads them);
/// elsewhere the run's log line carries the same numbers.
pub fn emit(report: &RunReport, at: DateTime<Utc>) {
    let vars = crate::config::Vars::from_env();
    let Some(function) = crate::config::LambdaConfig::from_vars(&vars).function_name else {
        return;
    };
    for line in emf_lines(report, &function, at) {
        println!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_lateness_are_emf_with_at_most_100_values_a_line() {
        let report = RunReport {
            claimed: 150,
            sent: 150,
            lateness_ms: (0..150).collect(),
            ..RunReport::default()
        };
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let lines: Vec<Value> = emf_lines(&report, "koe-dispatch", at)
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        let first = &lines[0];
        assert_eq!(first["Sent"], 150);
        assert_eq!(first["Function"], "koe-dispatch");
        assert_eq!(first["PushLateness"].as_array().unwrap().len(), 100);
        let directive = &first["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], NAMESPACE);
        assert_eq!(first["_aws"]["Timestamp"], 1_800_000_000_000i64);
        let names: Vec<&str> = directive["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["Name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"Missed") && names.contains(&"PushLateness"));
        assert!(names.contains(&"PushUnknown"), "{names:?}");
        // Every metric a directive names is a member of its line.
        for line in &lines {
            for metric in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
                .as_array()
                .unwrap()
            {
                assert!(line.get(metric["Name"].as_str().unwrap()).is_some());
            }
        }
        assert_eq!(lines[1]["PushLateness"].as_array().unwrap().len(), 50);
        assert!(lines[1].get("Sent").is_none());

        let quiet = emf_lines(&RunReport::default(), "f", at);
        assert_eq!(
            quiet.len(),
            1,
            "a run without pushes still reports its counts"
        );
    }
}
