//! One EMF record: a namespace, its dimension values and metric values, written as as many JSON
//! lines as the format's limits need (at most 100 values per metric per line).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Value, json};

/// EMF takes at most 100 values per metric per line.
pub const MAX_VALUES: usize = 100;
/// ...and at most 100 metrics per directive.
pub const MAX_METRICS: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Count,
    Milliseconds,
    Percent,
}

impl Unit {
    /// CloudWatch's name of the unit.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Milliseconds => "Milliseconds",
            Unit::Percent => "Percent",
        }
    }
}

/// Metrics of one namespace and one set of dimension values, at one time.
#[derive(Debug, Clone)]
pub struct Record {
    namespace: &'static str,
    timestamp_ms: i64,
    dimensions: Vec<(&'static str, String)>,
    metrics: Vec<(&'static str, Unit, Vec<Value>)>,
}

impl Record {
    pub fn new(namespace: &'static str, at: DateTime<Utc>) -> Record {
        Record {
            namespace,
            timestamp_ms: at.timestamp_millis(),
            dimensions: Vec::new(),
            metrics: Vec::new(),
        }
    }

    pub fn dimension(mut self, name: &'static str, value: &str) -> Record {
        self.dimensions.push((name, value.to_owned()));
        self
    }

    pub fn count(self, name: &'static str, value: u64) -> Record {
        self.values(name, Unit::Count, [json!(value)])
    }

    pub fn millis(self, name: &'static str, value: i64) -> Record {
        self.values(name, Unit::Milliseconds, [json!(value)])
    }

    pub fn percent(self, name: &'static str, value: f64) -> Record {
        self.values(
            name,
            Unit::Percent,
            [json!((value * 100.0).round() / 100.0)],
        )
    }

    /// A metric with many values (each becomes a sample: percentiles see every one).
    pub fn millis_each(self, name: &'static str, values: &[i64]) -> Record {
        self.values(name, Unit::Milliseconds, values.iter().map(|v| json!(v)))
    }

    fn values(
        mut self,
        name: &'static str,
        unit: Unit,
        values: impl IntoIterator<Item = Value>,
    ) -> Record {
        let values: Vec<Value> = values.into_iter().collect();
        if !values.is_empty() {
            self.metrics.push((name, unit, values));
        }
        self
    }

    /// The record's JSON lines: the first carries every metric (array metrics their first 100
    /// values), each further line the next 100 values of the metrics that have more.
    pub fn lines(&self) -> Vec<String> {
        #[cfg(debug_assertions)]
        self.check_catalogue();
        let longest = self.metrics.iter().map(|m| m.2.len()).max().unwrap_or(0);
        let chunks = longest.div_ceil(MAX_VALUES).max(1);
        (0..chunks)
            .map(|chunk| {
                serde_json::to_string(&Line {
                    record: self,
                    chunk,
                })
                .expect("an EMF line serializes: string keys, numbers and strings only")
            })
            .collect()
    }

    /// Every metric is the catalogue's, with its unit and dimensions (a bug otherwise).
    #[cfg(debug_assertions)]
    fn check_catalogue(&self) {
        assert!(self.metrics.len() <= MAX_METRICS);
        let dimensions: Vec<&str> = self.dimensions.iter().map(|d| d.0).collect();
        for (name, unit, _) in &self.metrics {
            let known = super::catalogue::find(self.namespace, name).unwrap_or_else(|| {
                panic!("{}/{name} is not in metrics::catalogue", self.namespace)
            });
            assert_eq!(known.unit, *unit, "{name}'s unit");
            assert_eq!(
                known.dimensions,
                dimensions.as_slice(),
                "{name}'s dimensions"
            );
        }
    }
}

/// One line of a record, written straight into its JSON (every request writes one or more
/// records: no `Value` tree is built for them).
struct Line<'a> {
    record: &'a Record,
    chunk: usize,
}

impl Line<'_> {
    /// Each metric's values on this line: a single value as a number (as the format's examples
    /// write it), else this line's part of the array; metrics with nothing left are left out.
    fn parts(&self) -> impl Iterator<Item = (&'static str, Unit, Part<'_>)> {
        let start = self.chunk * MAX_VALUES;
        self.record
            .metrics
            .iter()
            .filter_map(move |(name, unit, values)| {
                let part = values.get(start..values.len().min(start + MAX_VALUES))?;
                match part {
                    [] => None,
                    [one] if values.len() == 1 => Some((*name, *unit, Part::One(one))),
                    _ => Some((*name, *unit, Part::Many(part))),
                }
            })
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum Part<'a> {
    One(&'a Value),
    Many(&'a [Value]),
}

impl Serialize for Line<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut line = serializer.serialize_map(None)?;
        for (name, value) in &self.record.dimensions {
            line.serialize_entry(name, value)?;
        }
        for (name, _, part) in self.parts() {
            line.serialize_entry(name, &part)?;
        }
        let metrics: Vec<MetricName> = self
            .parts()
            .map(|(name, unit, _)| MetricName {
                name,
                unit: unit.as_str(),
            })
            .collect();
        let dimension_set: Vec<&str> = self.record.dimensions.iter().map(|d| d.0).collect();
        line.serialize_entry(
            "_aws",
            &Aws {
                timestamp: self.record.timestamp_ms,
                cloud_watch_metrics: [Directive {
                    namespace: self.record.namespace,
                    dimensions: [dimension_set],
                    metrics,
                }],
            },
        )?;
        line.end()
    }
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Aws<'a> {
    timestamp: i64,
    cloud_watch_metrics: [Directive<'a>; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Directive<'a> {
    namespace: &'static str,
    dimensions: [Vec<&'a str>; 1],
    metrics: Vec<MetricName>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct MetricName {
    name: &'static str,
    unit: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::metrics::catalogue::DISPATCH;

    fn parse(lines: Vec<String>) -> Vec<Value> {
        lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn values_past_100_go_to_further_lines_and_scalars_stay_on_the_first() {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let lateness: Vec<i64> = (0..250).collect();
        let lines = parse(
            Record::new(DISPATCH, at)
                .dimension("Function", "koe-dispatch")
                .count("Sent", 250)
                .millis_each("PushLateness", &lateness)
                .lines(),
        );
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["Sent"], 250);
        assert_eq!(lines[0]["Function"], "koe-dispatch");
        assert_eq!(lines[0]["_aws"]["Timestamp"], 1_800_000_000_000i64);
        let sizes: Vec<usize> = lines
            .iter()
            .map(|l| l["PushLateness"].as_array().unwrap().len())
            .collect();
        assert_eq!(sizes, [100, 100, 50]);
        assert!(lines[1].get("Sent").is_none());
        let names = |l: &Value| -> Vec<String> {
            l["_aws"]["CloudWatchMetrics"][0]["Metrics"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["Name"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(names(&lines[0]), ["Sent", "PushLateness"]);
        assert_eq!(names(&lines[2]), ["PushLateness"]);
        assert_eq!(
            lines[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Function"]])
        );
    }

    #[test]
    fn a_metric_without_values_is_left_out() {
        let at = DateTime::from_timestamp(0, 0).unwrap();
        let lines = parse(
            Record::new(DISPATCH, at)
                .dimension("Function", "f")
                .millis_each("PushLateness", &[])
                .count("Sent", 0)
                .lines(),
        );
        assert_eq!(lines.len(), 1);
        assert!(lines[0].get("PushLateness").is_none());
        assert_eq!(lines[0]["Sent"], 0);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "not in metrics::catalogue")]
    fn a_metric_the_catalogue_does_not_list_is_a_bug() {
        let at = DateTime::from_timestamp(0, 0).unwrap();
        Record::new(DISPATCH, at)
            .dimension("Function", "f")
            .count("Sendt", 1)
            .lines();
    }
}
