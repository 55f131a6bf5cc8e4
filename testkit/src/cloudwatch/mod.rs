//! A CloudWatch metric alarm evaluator: an alarm of `template.yaml` run minute by minute over per-minute samples.
//!
//! The model, after AWS's "Using Amazon CloudWatch alarms" (evaluating an alarm, M out of N,
//! how alarm state is evaluated when data is missing):
//! - Samples are raw values per minute (minute 0 is the start of the simulated time). A period
//!   of P minutes aggregates minutes `[k·P, (k+1)·P)`, aligned to the clock as CloudWatch's are.
//! - The alarm is evaluated at the start of every minute `e` and sees the periods complete by
//!   then (a period still filling is not evaluated: the model never fires early on partial data).
//! - Each evaluation retrieves the *evaluation range*, more periods than `EvaluationPeriods` (N):
//!   N + 2, as in AWS's examples (N = 3 retrieves 5). If N or more of them hold a datapoint, the
//!   N most recent datapoints are evaluated and `TreatMissingData` plays no part. Otherwise every
//!   datapoint is used and the rest, up to N, are filled as `TreatMissingData` says. ALARM when
//!   at least `DatapointsToAlarm` (M) of them breach, else OK; `missing` and `ignore` keep or
//!   give up the state as AWS's tables show (see `decide`).
//! - Metric math (`Metrics:` with `Expression`) is computed per period over the range; see
//!   `expression` for the functions supported (anything else panics).

mod definition;
mod expression;
mod samples;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::ops::Range;

pub use definition::{Resolve, alarm_from_properties};
pub use expression::Expression;
pub use samples::Samples;

/// A metric: namespace, name and dimensions (kept sorted by name, as CloudWatch matches them).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MetricId {
    pub namespace: String,
    pub name: String,
    pub dimensions: Vec<(String, String)>,
}

impl MetricId {
    pub fn new(namespace: &str, name: &str, dimensions: &[(&str, &str)]) -> Self {
        let mut dimensions: Vec<(String, String)> = dimensions
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        dimensions.sort();
        MetricId {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            dimensions,
        }
    }
}

impl std::fmt::Display for MetricId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)?;
        for (name, value) in &self.dimensions {
            write!(f, " {name}={value}")?;
        }
        Ok(())
    }
}

/// A statistic over one period's raw values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Statistic {
    Sum,
    Average,
    Minimum,
    Maximum,
    SampleCount,
    /// `p99`, `p99.9`: the nearest-rank percentile.
    Percentile(f64),
}

impl Statistic {
    /// CloudWatch's spelling (`Sum`, `SampleCount`, `p99`, ...); anything else panics.
    pub fn parse(text: &str) -> Self {
        match text {
            "Sum" => Statistic::Sum,
            "Average" => Statistic::Average,
            "Minimum" => Statistic::Minimum,
            "Maximum" => Statistic::Maximum,
            "SampleCount" => Statistic::SampleCount,
            _ => match text.strip_prefix('p').and_then(|p| p.parse::<f64>().ok()) {
                Some(p) if p > 0.0 && p <= 100.0 => Statistic::Percentile(p),
                _ => panic!("unsupported statistic {text:?}"),
            },
        }
    }

    /// The period's datapoint, or none when the period received no value.
    pub fn of(self, values: &[f64]) -> Option<f64> {
        if values.is_empty() {
            return None;
        }
        let n = values.len() as f64;
        Some(match self {
            Statistic::Sum => values.iter().sum(),
            Statistic::Average => values.iter().sum::<f64>() / n,
            Statistic::Minimum => values.iter().copied().fold(f64::INFINITY, f64::min),
            Statistic::Maximum => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            Statistic::SampleCount => n,
            Statistic::Percentile(p) => {
                let mut sorted = values.to_vec();
                sorted.sort_by(f64::total_cmp);
                let rank = ((p / 100.0 * n).ceil() as usize).clamp(1, sorted.len());
                sorted[rank - 1]
            }
        })
    }
}

/// One metric under one statistic and period.
#[derive(Clone, Debug)]
pub struct MetricStat {
    pub metric: MetricId,
    pub statistic: Statistic,
    pub period_minutes: u32,
}

#[derive(Clone, Debug)]
pub enum Query {
    Stat(MetricStat),
    Expression(Expression),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    GreaterThanOrEqualToThreshold,
    GreaterThanThreshold,
    LessThanThreshold,
    LessThanOrEqualToThreshold,
}

impl Comparison {
    pub fn parse(text: &str) -> Self {
        match text {
            "GreaterThanOrEqualToThreshold" => Comparison::GreaterThanOrEqualToThreshold,
            "GreaterThanThreshold" => Comparison::GreaterThanThreshold,
            "LessThanThreshold" => Comparison::LessThanThreshold,
            "LessThanOrEqualToThreshold" => Comparison::LessThanOrEqualToThreshold,
            other => panic!("unsupported ComparisonOperator {other:?}"),
        }
    }

    pub fn breaches(self, value: f64, threshold: f64) -> bool {
        match self {
            Comparison::GreaterThanOrEqualToThreshold => value >= threshold,
            Comparison::GreaterThanThreshold => value > threshold,
            Comparison::LessThanThreshold => value < threshold,
            Comparison::LessThanOrEqualToThreshold => value <= threshold,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissingData {
    Missing,
    NotBreaching,
    Breaching,
    Ignore,
}

impl MissingData {
    pub fn parse(text: &str) -> Self {
        match text {
            "missing" => MissingData::Missing,
            "notBreaching" => MissingData::NotBreaching,
            "breaching" => MissingData::Breaching,
            "ignore" => MissingData::Ignore,
            other => panic!("unsupported TreatMissingData {other:?}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    InsufficientData,
    Ok,
    Alarm,
}

/// A metric alarm: one metric, or metric math whose `ReturnData` query is compared.
#[derive(Clone, Debug)]
pub struct Alarm {
    pub name: String,
    /// The queries by id; a single-metric alarm is one query, `m1`.
    pub queries: BTreeMap<String, Query>,
    /// The id whose values are compared with the threshold.
    pub returned: String,
    pub period_minutes: u32,
    pub evaluation_periods: u32,
    pub datapoints_to_alarm: u32,
    pub threshold: f64,
    pub comparison: Comparison,
    pub missing_data: MissingData,
}

/// The state after each minute's evaluation.
#[derive(Clone, Debug)]
pub struct Evaluation {
    pub states: Vec<(u32, State)>,
}

impl Evaluation {
    /// The minutes at which the state changed, with the new state.
    pub fn transitions(&self) -> Vec<(u32, State)> {
        let mut last = State::InsufficientData;
        let mut changes = Vec::new();
        for &(minute, state) in &self.states {
            if state != last {
                changes.push((minute, state));
                last = state;
            }
        }
        changes
    }

    /// The minutes at which the alarm entered ALARM (each one a page).
    pub fn alarms(&self) -> Vec<u32> {
        self.transitions()
            .into_iter()
            .filter(|(_, state)| *state == State::Alarm)
            .map(|(minute, _)| minute)
            .collect()
    }

    pub fn first_alarm(&self) -> Option<u32> {
        self.alarms().first().copied()
    }

    pub fn state_at(&self, minute: u32) -> State {
        self.states
            .iter()
            .take_while(|(m, _)| *m <= minute)
            .last()
            .map_or(State::InsufficientData, |(_, s)| *s)
    }
}

/// How many periods an evaluation retrieves: N + 2, as AWS's examples show for N = 3.
pub fn evaluation_range(evaluation_periods: u32) -> u32 {
    evaluation_periods + 2
}

impl Alarm {
    /// Every metric the alarm reads, with its statistic.
    pub fn metric_stats(&self) -> impl Iterator<Item = &MetricStat> {
        self.queries.values().filter_map(|q| match q {
            Query::Stat(stat) => Some(stat),
            Query::Expression(_) => None,
        })
    }

    /// The compared values of periods `periods` (period indices), absent where there is none.
    pub fn datapoints(&self, samples: &Samples, periods: Range<u32>) -> BTreeMap<u32, f64> {
        self.series(&self.returned, samples, &periods, &mut Vec::new())
    }

    pub(crate) fn series(
        &self,
        id: &str,
        samples: &Samples,
        periods: &Range<u32>,
        visiting: &mut Vec<String>,
    ) -> BTreeMap<u32, f64> {
        assert!(
            !visiting.iter().any(|v| v == id),
            "{}: metric math refers to itself through {id}",
            self.name
        );
        let query = self
            .queries
            .get(id)
            .unwrap_or_else(|| panic!("{}: no query with id {id}", self.name));
        match query {
            Query::Stat(stat) => {
                let p = stat.period_minutes;
                periods
                    .clone()
                    .filter_map(|k| {
                        let values = samples.values(&stat.metric, k * p..(k + 1) * p);
                        stat.statistic.of(&values).map(|v| (k, v))
                    })
                    .collect()
            }
            Query::Expression(expression) => {
                visiting.push(id.to_owned());
                let series = expression.evaluate(
                    &mut |name: &str| self.series(name, samples, periods, visiting),
                    periods,
                );
                visiting.pop();
                series
            }
        }
    }

    /// Runs the alarm's evaluation at the start of every minute of `minutes`.
    pub fn evaluate(&self, samples: &Samples, minutes: Range<u32>) -> Evaluation {
        let mut state = State::InsufficientData;
        let mut states = Vec::new();
        for minute in minutes {
            let complete = minute / self.period_minutes;
            if complete > 0 {
                let range = evaluation_range(self.evaluation_periods);
                let first = complete.saturating_sub(range);
                let datapoints = self.datapoints(samples, first..complete);
                let breaching: Vec<(u32, bool)> = datapoints
                    .iter()
                    .map(|(k, v)| (*k - first, self.comparison.breaches(*v, self.threshold)))
                    .collect();
                state = self.decide(&breaching, complete - first, state);
            }
            states.push((minute, state));
        }
        Evaluation { states }
    }

    /// The state from the datapoints of the evaluation range (`(slot, breaching)`, slot 0 the
    /// oldest of `slots`), as AWS's missing-data tables show it.
    pub fn decide(&self, datapoints: &[(u32, bool)], slots: u32, current: State) -> State {
        let n = self.evaluation_periods as usize;
        let m = self.datapoints_to_alarm as usize;
        let verdict = |breaching: usize| {
            if breaching >= m {
                State::Alarm
            } else {
                State::Ok
            }
        };
        if datapoints.len() >= n {
            let recent = &datapoints[datapoints.len() - n..];
            return verdict(recent.iter().filter(|(_, b)| *b).count());
        }
        let real_breaching = datapoints.iter().filter(|(_, b)| *b).count();
        let fills = n - datapoints.len();
        match self.missing_data {
            MissingData::NotBreaching => verdict(real_breaching),
            MissingData::Breaching => verdict(real_breaching + fills),
            MissingData::Missing | MissingData::Ignore => {
                if real_breaching >= m {
                    State::Alarm
                } else if real_breaching < datapoints.len() {
                    // A real datapoint within the threshold.
                    State::Ok
                } else if self.missing_data == MissingData::Ignore {
                    current
                } else if datapoints.first().is_some_and(|(slot, _)| *slot == 0) {
                    // AWS's table: "X - - - -" alarms, "- - - - X" is INSUFFICIENT_DATA.
                    debug_assert!(slots > 0);
                    State::Alarm
                } else {
                    State::InsufficientData
                }
            }
        }
    }
}
