//! A run's numbers as EMF records in `Koe/Dispatch` (see `metrics::catalogue` for each metric's
//! meaning): one record of counts and latenesses per run or part, dimension `Function`, and one
//! `ApnsErrors` record per APNs error reason met, dimensions `Function` and `Reason`.

use chrono::{DateTime, Utc};

use super::RunReport;
use super::dispatcher::Dispatcher;
use crate::metrics::Record;
use crate::metrics::catalogue::DISPATCH;

/// The records of one run.
pub fn records(report: &RunReport, function: &str, at: DateTime<Utc>) -> Vec<Record> {
    let counts = [
        ("Selected", report.selected),
        ("Claimed", report.claimed),
        ("Sent", report.sent),
        ("Failed", report.failed),
        ("PushUnknown", report.push_unknown),
        ("Missed", report.missed),
        ("Lost", report.lost),
        ("Released", report.released),
        ("Abandoned", report.abandoned),
        ("Resolved", report.resolved),
        ("Unresolved", report.unresolved),
        ("StoreRetries", report.store_retries),
        ("StoreThrottles", report.store_throttles),
        ("StoreErrors", report.store_errors),
        ("TokensRemoved", report.tokens_removed),
        ("PartsHandedOut", report.handed_out),
    ];
    // Published only in the runs that have them: most stacks have no device that confirms.
    let confirming = [
        ("RePushed", report.re_pushed),
        ("Unconfirmed", report.unconfirmed),
    ]
    .into_iter()
    .filter(|(_, value)| *value > 0);
    let run = counts
        .into_iter()
        .chain(confirming)
        .fold(
            Record::new(DISPATCH, at).dimension("Function", function),
            |record, (name, value)| record.count(name, u64::from(value)),
        )
        .millis("RunDuration", report.duration_ms)
        .millis_each("PushLateness", &report.lateness_ms);
    let errors = report.apns_errors.iter().map(|(reason, n)| {
        Record::new(DISPATCH, at)
            .dimension("Function", function)
            .dimension("Reason", reason)
            .count("ApnsErrors", u64::from(*n))
    });
    std::iter::once(run).chain(errors).collect()
}

impl Dispatcher {
    /// Emits a finished run's records.
    pub(super) fn measured(&self, report: &RunReport) {
        let at = self.clock.now();
        for record in records(report, self.metrics.function(), at) {
            self.metrics.emit(&record);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn a_run_is_one_record_of_counts_and_one_per_apns_error_reason() {
        let mut report = RunReport {
            selected: 150,
            claimed: 150,
            sent: 149,
            failed: 1,
            resolved: 3,
            store_throttles: 2,
            duration_ms: 61_250,
            lateness_ms: (0..149).collect(),
            ..RunReport::default()
        };
        report.apns_errors.insert("BadDeviceToken".into(), 1);
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let lines: Vec<Value> = records(&report, "koe-dispatch", at)
            .iter()
            .flat_map(Record::lines)
            .map(|l| serde_json::from_str(&l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert_eq!(lines[0]["Sent"], 149);
        assert_eq!(lines[0]["Resolved"], 3);
        assert_eq!(lines[0]["StoreThrottles"], 2);
        assert_eq!(lines[0]["RunDuration"], 61_250);
        assert_eq!(lines[0]["PushLateness"].as_array().unwrap().len(), 100);
        assert_eq!(lines[1]["PushLateness"].as_array().unwrap().len(), 49);
        assert_eq!(lines[2]["Reason"], "BadDeviceToken");
        assert_eq!(lines[2]["ApnsErrors"], 1);
        assert_eq!(
            lines[2]["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            serde_json::json!([["Function", "Reason"]])
        );
        let quiet = records(&RunReport::default(), "f", at);
        assert_eq!(quiet.len(), 1, "a quiet run still reports its counts");
        assert!(quiet[0].lines()[0].contains("\"Sent\":0"));
    }
}
