//! A run's numbers as EMF records in `Koe/Dispatch` (see `metrics::catalogue` for each metric's
//! meaning): one record per run or part, dimension `Function`, holding `RunDuration` always,
//! each count only when it is not 0 and `PushLateness` only when pushes left (a metric costs in
//! each hour it has data: an idle run publishes one); and one `ApnsErrors` record per APNs
//! error reason met, dimensions `Function` and `Reason`.

use chrono::{DateTime, Utc};

use super::RunReport;
use super::dispatcher::Dispatcher;
use crate::platform::metrics::Record;
use crate::platform::metrics::catalogue::DISPATCH;

/// The records of one run.
pub fn records(report: &RunReport, function: &str, at: DateTime<Utc>) -> Vec<Record> {
    let counts = [
        ("Selected", report.selected),
        ("Claimed", report.claimed),
        ("Sent", report.sent),
        ("Failed", report.failed),
        ("PushUnknown", report.push_unknown),
        ("DeadTokens", report.dead_tokens),
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
        ("RePushed", report.re_pushed),
        ("Unconfirmed", report.unconfirmed),
        ("NoticesSent", report.notices_sent),
        ("NoticesFailed", report.notices_failed),
    ];
    // Only the counts a run has: the alarms read a minute without one as 0 (`FILL`), so a zero
    // would cost a metric-hour and say nothing.
    let run = counts
        .into_iter()
        .filter(|(_, value)| *value > 0)
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

    fn lines(records: &[Record]) -> Vec<Value> {
        records
            .iter()
            .flat_map(Record::lines)
            .map(|l| serde_json::from_str(&l).unwrap())
            .collect()
    }

    /// The metric names a line's directive declares.
    fn declared(line: &Value) -> Vec<&str> {
        line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["Name"].as_str().unwrap())
            .collect()
    }

    fn at() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    #[test]
    fn a_run_is_one_record_of_its_counts_and_one_per_apns_error_reason() {
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
        let lines = lines(&records(&report, "koe-dispatch", at()));
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert_eq!(
            declared(&lines[0]),
            [
                "Selected",
                "Claimed",
                "Sent",
                "Failed",
                "Resolved",
                "StoreThrottles",
                "RunDuration",
                "PushLateness"
            ],
            "the counts that are not 0, the duration, the lateness"
        );
        assert_eq!(lines[0]["Sent"], 149);
        assert_eq!(lines[0]["Resolved"], 3);
        assert_eq!(lines[0]["StoreThrottles"], 2);
        assert_eq!(lines[0]["RunDuration"], 61_250);
        assert!(lines[0].get("Missed").is_none(), "no zero is written");
        assert_eq!(lines[0]["PushLateness"].as_array().unwrap().len(), 100);
        assert_eq!(declared(&lines[1]), ["PushLateness"]);
        assert_eq!(lines[1]["PushLateness"].as_array().unwrap().len(), 49);
        assert_eq!(lines[2]["Reason"], "BadDeviceToken");
        assert_eq!(lines[2]["ApnsErrors"], 1);
        assert_eq!(
            lines[2]["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            serde_json::json!([["Function", "Reason"]])
        );
    }

    #[test]
    fn a_quiet_run_publishes_its_duration_only() {
        let quiet = RunReport {
            duration_ms: 70_120,
            ..RunReport::default()
        };
        let lines = lines(&records(&quiet, "koe-dispatch", at()));
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert_eq!(declared(&lines[0]), ["RunDuration"]);
        assert_eq!(lines[0]["RunDuration"], 70_120);
        assert_eq!(lines[0]["Function"], "koe-dispatch");
        let members: Vec<&String> = lines[0].as_object().unwrap().keys().collect();
        assert_eq!(members, ["Function", "RunDuration", "_aws"], "nothing else");
    }

    #[test]
    fn every_count_is_written_when_it_is_not_0() {
        let one = RunReport {
            selected: 1,
            claimed: 1,
            sent: 1,
            failed: 1,
            push_unknown: 1,
            dead_tokens: 1,
            missed: 1,
            lost: 1,
            released: 1,
            abandoned: 1,
            resolved: 1,
            unresolved: 1,
            store_retries: 1,
            store_throttles: 1,
            store_errors: 1,
            tokens_removed: 1,
            handed_out: 1,
            re_pushed: 1,
            unconfirmed: 1,
            notices_sent: 1,
            notices_failed: 1,
            ..RunReport::default()
        };
        let lines = lines(&records(&one, "koe-dispatch-part", at()));
        let names = declared(&lines[0]);
        // Each of the catalogue's run counts: the 21 counts and the duration.
        assert_eq!(names.len(), 22, "{names:?}");
        for name in &names[..21] {
            assert_eq!(lines[0][*name], 1, "{name}");
        }
        assert_eq!(names[21], "RunDuration");
    }
}
