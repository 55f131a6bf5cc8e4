//! Samples: the raw values each metric received, minute by minute, put one by one or read from
//! EMF lines as CloudWatch Logs turns a function's lines into metrics.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use super::MetricId;
use crate::emf;

/// The raw values each metric received, minute by minute.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    by_metric: HashMap<MetricId, BTreeMap<u32, Vec<f64>>>,
}

impl Samples {
    pub fn new() -> Self {
        Self::default()
    }

    /// One value (one EMF record's figure, one request's latency, one API Gateway minute's count).
    pub fn put(&mut self, metric: &MetricId, minute: u32, value: f64) {
        self.put_all(metric, minute, [value]);
    }

    pub fn put_all(
        &mut self,
        metric: &MetricId,
        minute: u32,
        values: impl IntoIterator<Item = f64>,
    ) {
        self.by_metric
            .entry(metric.clone())
            .or_default()
            .entry(minute)
            .or_default()
            .extend(values);
    }

    /// Forgets what the metric received in these minutes (a stopped publisher).
    pub fn remove(&mut self, metric: &MetricId, minutes: Range<u32>) {
        if let Some(series) = self.by_metric.get_mut(metric) {
            series.retain(|minute, _| !minutes.contains(minute));
        }
    }

    /// Whether the metric received anything at all.
    pub fn has(&self, metric: &MetricId) -> bool {
        self.by_metric
            .get(metric)
            .is_some_and(|series| series.values().any(|v| !v.is_empty()))
    }

    pub(super) fn values(&self, metric: &MetricId, minutes: Range<u32>) -> Vec<f64> {
        self.by_metric
            .get(metric)
            .map(|series| {
                series
                    .range(minutes)
                    .flat_map(|(_, v)| v.iter().copied())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every metric that received a value.
    pub fn metrics(&self) -> Vec<&MetricId> {
        let mut metrics: Vec<&MetricId> = self
            .by_metric
            .iter()
            .filter(|(_, series)| series.values().any(|v| !v.is_empty()))
            .map(|(id, _)| id)
            .collect();
        metrics.sort();
        metrics
    }

    /// Every value of an EMF `line` (checked against the specification: a line that is not EMF
    /// panics) as a sample of `minute`, under each metric it is published as.
    pub fn put_emf(&mut self, minute: u32, line: &str) {
        let parsed = emf::parse(line).unwrap_or_else(|e| panic!("not EMF ({e}): {line}"));
        for metric in &parsed.metrics {
            for id in MetricId::of_emf(metric) {
                self.put_all(&id, minute, metric.values.iter().copied());
            }
        }
    }
}

impl MetricId {
    /// The metrics an EMF metric is published as: one per dimension set of its directive.
    pub fn of_emf(metric: &emf::Metric) -> Vec<MetricId> {
        metric
            .dimensions
            .iter()
            .map(|set| {
                let dimensions: Vec<(&str, &str)> =
                    set.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                MetricId::new(&metric.namespace, &metric.name, &dimensions)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_is_a_sample_of_each_dimension_set() {
        let line = r#"{"Function":"koe-dispatch","Reason":"BadDeviceToken","ApnsErrors":2,
            "PushLateness":[3,4],"_aws":{"Timestamp":0,"CloudWatchMetrics":[{
            "Namespace":"Koe/Dispatch","Dimensions":[["Function","Reason"],["Function"]],
            "Metrics":[{"Name":"ApnsErrors","Unit":"Count"},{"Name":"PushLateness"}]}]}}"#;
        let mut samples = Samples::new();
        samples.put_emf(7, line);
        let both = MetricId::new(
            "Koe/Dispatch",
            "ApnsErrors",
            &[("Reason", "BadDeviceToken"), ("Function", "koe-dispatch")],
        );
        let function = [("Function", "koe-dispatch")];
        let lateness = MetricId::new("Koe/Dispatch", "PushLateness", &function);
        assert_eq!(samples.values(&both, 7..8), [2.0]);
        assert_eq!(
            samples.values(
                &MetricId::new("Koe/Dispatch", "ApnsErrors", &function),
                0..60
            ),
            [2.0]
        );
        assert_eq!(samples.values(&lateness, 7..8), [3.0, 4.0]);
        assert!(samples.values(&lateness, 0..7).is_empty());
        assert!(!samples.has(&MetricId::new("Koe/Dispatch", "Sent", &function)));
        // Each metric of the directive under each of its dimension sets.
        let by_function = MetricId::new("Koe/Dispatch", "ApnsErrors", &function);
        let both_sets = MetricId::new(
            "Koe/Dispatch",
            "PushLateness",
            &[("Reason", "BadDeviceToken"), ("Function", "koe-dispatch")],
        );
        assert_eq!(
            samples.metrics(),
            [&by_function, &both, &lateness, &both_sets]
        );
    }
}
