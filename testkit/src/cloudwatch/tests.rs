//! The evaluator against AWS's documented examples: M of N, missing data, periods, percentiles, metric math.

use std::collections::BTreeMap;

use serde_norway::Value;

use super::*;

fn metric(name: &str) -> MetricId {
    MetricId::new("Test", name, &[("Function", "f")])
}

/// `Sum(m) >= threshold` per `period` minutes, M of N.
fn alarm(m: u32, n: u32, missing: MissingData, period: u32, threshold: f64) -> Alarm {
    Alarm {
        name: "test".into(),
        queries: BTreeMap::from([(
            "m1".to_owned(),
            Query::Stat(MetricStat {
                metric: metric("Errors"),
                statistic: Statistic::Sum,
                period_minutes: period,
            }),
        )]),
        returned: "m1".into(),
        period_minutes: period,
        evaluation_periods: n,
        datapoints_to_alarm: m,
        threshold,
        comparison: Comparison::GreaterThanOrEqualToThreshold,
        missing_data: missing,
    }
}

/// AWS's notation: `0` within the threshold, `X` breaching, `-` missing, oldest first.
fn slots(row: &str) -> (Vec<(u32, bool)>, u32) {
    let cells: Vec<&str> = row.split_whitespace().collect();
    let points = cells
        .iter()
        .enumerate()
        .filter(|(_, c)| **c != "-")
        .map(|(i, c)| (i as u32, *c == "X"))
        .collect();
    (points, cells.len() as u32)
}

/// `None`: "retain current state".
const INSUFFICIENT: Option<State> = Some(State::InsufficientData);
const OK: Option<State> = Some(State::Ok);
const ALARM: Option<State> = Some(State::Alarm);
const RETAIN: Option<State> = None;

fn check_table(m: u32, n: u32, rows: &[(&str, [Option<State>; 4])]) {
    let modes = [
        MissingData::Missing,
        MissingData::Ignore,
        MissingData::Breaching,
        MissingData::NotBreaching,
    ];
    for (row, expected) in rows {
        let (points, count) = slots(row);
        for (mode, want) in modes.iter().zip(expected) {
            let alarm = alarm(m, n, *mode, 1, 1.0);
            for current in [State::Ok, State::Alarm] {
                let got = alarm.decide(&points, count, current);
                assert_eq!(
                    got,
                    want.unwrap_or(current),
                    "{m} of {n}, {row}, {mode:?}, from {current:?}"
                );
            }
        }
    }
}

#[test]
fn missing_data_as_in_aws_table_for_3_of_3() {
    check_table(
        3,
        3,
        &[
            ("0 - X - X", [OK, OK, OK, OK]),
            ("0 - - - -", [OK, OK, OK, OK]),
            ("- - - - -", [INSUFFICIENT, RETAIN, ALARM, OK]),
            ("0 X X - X", [ALARM, ALARM, ALARM, ALARM]),
            ("- - - - X", [INSUFFICIENT, RETAIN, ALARM, OK]),
            ("X - - - -", [ALARM, RETAIN, ALARM, OK]),
        ],
    );
}

#[test]
fn missing_data_as_in_aws_table_for_2_of_3() {
    check_table(
        2,
        3,
        &[
            ("0 - X - X", [ALARM, ALARM, ALARM, ALARM]),
            ("0 0 X 0 X", [ALARM, ALARM, ALARM, ALARM]),
            ("0 - X - -", [OK, OK, ALARM, OK]),
            ("- - - - 0", [OK, OK, ALARM, OK]),
            ("- - - - X", [INSUFFICIENT, RETAIN, ALARM, OK]),
        ],
    );
}

/// Sum per minute with `value` at each of `minutes`, zeros elsewhere in `0..60`.
fn errors_at(minutes: &[u32], value: f64) -> Samples {
    let mut samples = Samples::new();
    for minute in 0..60 {
        let v = if minutes.contains(&minute) {
            value
        } else {
            0.0
        };
        samples.put(&metric("Errors"), minute, v);
    }
    samples
}

#[test]
fn one_breaching_minute_fires_1_of_5_at_once_and_never_5_of_5() {
    let samples = errors_at(&[7], 1.0);
    let one_of_five = alarm(1, 5, MissingData::NotBreaching, 1, 1.0).evaluate(&samples, 0..60);
    assert_eq!(
        one_of_five.alarms(),
        [8],
        "evaluated once minute 7 is complete"
    );
    assert_eq!(one_of_five.state_at(12), State::Alarm);
    assert_eq!(
        one_of_five.state_at(13),
        State::Ok,
        "5 quiet minutes clear it"
    );
    let five_of_five = alarm(5, 5, MissingData::NotBreaching, 1, 1.0).evaluate(&samples, 0..60);
    assert_eq!(five_of_five.alarms(), Vec::<u32>::new());
}

#[test]
fn every_other_minute_pages_once_at_1_of_5_flaps_at_3_of_5_never_at_5_of_5() {
    let samples = errors_at(&[10, 12, 14, 16, 18, 20], 1.0);
    // 3 of 5 pages, clears when a window holds only 2, and pages again: 1, 0, 1, 0, 1 flaps.
    let three = alarm(3, 5, MissingData::NotBreaching, 1, 1.0).evaluate(&samples, 0..60);
    assert_eq!(three.alarms(), [15, 17, 19, 21]);
    let five = alarm(5, 5, MissingData::NotBreaching, 1, 1.0).evaluate(&samples, 0..60);
    assert!(five.alarms().is_empty());
    let one = alarm(1, 5, MissingData::NotBreaching, 1, 1.0).evaluate(&samples, 0..60);
    assert_eq!(one.alarms(), [11], "one page for the whole run of them");
}

#[test]
fn periods_are_clock_aligned_and_evaluated_when_complete() {
    let five_minutes = alarm(1, 1, MissingData::NotBreaching, 5, 5.0);
    // 3 + 3 in one period [5, 10): fires when it is complete, at minute 10.
    let same = five_minutes.evaluate(&errors_at(&[5, 9], 3.0), 0..30);
    assert_eq!(same.alarms(), [10]);
    // 3 + 3 across two periods: neither reaches 5.
    let across = five_minutes.evaluate(&errors_at(&[4, 5], 3.0), 0..30);
    assert!(across.alarms().is_empty());
}

#[test]
fn missing_as_breaching_waits_for_the_range_to_empty() {
    // A heartbeat every minute until minute 10; `< 1` with missing data breaching, 3 of 3.
    let mut heartbeat = alarm(3, 3, MissingData::Breaching, 1, 1.0);
    heartbeat.comparison = Comparison::LessThanThreshold;
    heartbeat.queries.insert(
        "m1".into(),
        Query::Stat(MetricStat {
            metric: metric("Runs"),
            statistic: Statistic::SampleCount,
            period_minutes: 1,
        }),
    );
    let mut samples = Samples::new();
    for minute in 0..10 {
        samples.put(&metric("Runs"), minute, 70_000.0);
    }
    let evaluation = heartbeat.evaluate(&samples, 0..30);
    // Minutes 10, 11, 12 are missing at minute 13, but the range of 5 still holds 8 and 9.
    assert_eq!(evaluation.alarms(), [15]);
    // With the gaps filled by metric math, the third empty minute is enough.
    heartbeat
        .queries
        .insert("runs".into(), heartbeat.queries["m1"].clone());
    heartbeat.queries.insert(
        "m1".into(),
        Query::Expression(Expression::parse("FILL(runs, 0)")),
    );
    assert_eq!(heartbeat.evaluate(&samples, 0..30).alarms(), [13]);
}

#[test]
fn statistics_and_nearest_rank_percentiles() {
    let values: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(Statistic::parse("p99").of(&values), Some(99.0));
    assert_eq!(Statistic::parse("p50").of(&values), Some(50.0));
    assert_eq!(Statistic::parse("p99.9").of(&values), Some(100.0));
    assert_eq!(Statistic::parse("p99").of(&[3.0, 1500.0]), Some(1500.0));
    assert_eq!(Statistic::Sum.of(&values), Some(5050.0));
    assert_eq!(Statistic::Average.of(&values), Some(50.5));
    assert_eq!(Statistic::SampleCount.of(&values), Some(100.0));
    assert_eq!(Statistic::Maximum.of(&values), Some(100.0));
    assert_eq!(Statistic::Minimum.of(&values), Some(1.0));
    assert_eq!(Statistic::Sum.of(&[]), None, "no value, no datapoint");
    // One slow push in a hundred is not the p99 (the 99th of 100); two are.
    let mut pushes = vec![10.0; 98];
    pushes.extend([1500.0, 1500.0]);
    assert_eq!(Statistic::parse("p99").of(&pushes), Some(1500.0));
    let mut one_slow = vec![10.0; 99];
    one_slow.push(1500.0);
    assert_eq!(Statistic::parse("p99").of(&one_slow), Some(10.0));
    // Under 100 values the 99th percentile is the largest.
    assert_eq!(Statistic::parse("p99").of(&one_slow[1..]), Some(1500.0));
}

#[test]
#[should_panic(expected = "unsupported statistic")]
fn an_unknown_statistic_panics() {
    Statistic::parse("tm99");
}

fn series(pairs: &[(u32, f64)]) -> BTreeMap<u32, f64> {
    pairs.iter().copied().collect()
}

fn evaluate(
    text: &str,
    inputs: &[(&str, BTreeMap<u32, f64>)],
    periods: Range<u32>,
) -> BTreeMap<u32, f64> {
    let inputs: BTreeMap<&str, BTreeMap<u32, f64>> = inputs.iter().cloned().collect();
    Expression::parse(text).evaluate(&mut |id: &str| inputs[id].clone(), &periods)
}

#[test]
fn metric_math_fill_addition_max_if_and_division() {
    let a = series(&[(1, 2.0), (3, 1.0)]);
    let b = series(&[(3, 4.0)]);
    let inputs = [("a", a), ("b", b)];
    assert_eq!(
        evaluate("FILL(a,0)+FILL(b,0)", &inputs, 0..4),
        series(&[(0, 0.0), (1, 2.0), (2, 0.0), (3, 5.0)])
    );
    assert_eq!(
        evaluate("a + b", &inputs, 0..4),
        series(&[(3, 5.0)]),
        "only where both have one"
    );
    assert_eq!(
        evaluate("MAX([FILL(a,0), FILL(b,0)])", &inputs, 0..4),
        series(&[(0, 0.0), (1, 2.0), (2, 0.0), (3, 4.0)])
    );
    assert_eq!(
        evaluate("MAX([a, b])", &inputs, 0..4),
        series(&[(1, 2.0), (3, 4.0)])
    );
    let errors = series(&[(0, 4.0), (1, 6.0), (2, 6.0), (3, 0.0)]);
    let total = series(&[(0, 10.0), (1, 100.0), (2, 0.0), (3, 0.0)]);
    let inputs = [("errors", errors), ("total", total)];
    assert_eq!(
        evaluate("IF(errors >= 5, 100 * errors / total, 0)", &inputs, 0..4),
        series(&[(0, 0.0), (1, 6.0), (3, 0.0)]),
        "under 5 errors: 0; a division by zero: no datapoint"
    );
    assert_eq!(
        evaluate("-(2 - 3) * 4", &[], 0..2),
        series(&[(0, 4.0), (1, 4.0)])
    );
}

#[test]
#[should_panic(expected = "function RATE is not supported")]
fn an_unsupported_function_panics() {
    Expression::parse("RATE(m1)");
}

#[test]
#[should_panic(expected = "MAX of one series is a scalar")]
fn max_of_one_series_panics() {
    Expression::parse("MAX(m1)");
}

fn yaml(text: &str) -> Value {
    serde_norway::from_str(text).unwrap()
}

fn plain(value: &Value) -> String {
    value.as_str().unwrap().to_owned()
}

#[test]
fn a_metric_math_alarm_from_its_properties() {
    let properties = yaml(
        r#"
AlarmName: koe-late
Metrics:
  - Id: late
    Expression: "MAX([FILL(a,0), FILL(b,0)])"
    ReturnData: true
  - Id: a
    ReturnData: false
    MetricStat:
      Stat: p99
      Period: 60
      Metric: { Namespace: Test, MetricName: Late, Dimensions: [{ Name: Function, Value: a }] }
  - Id: b
    ReturnData: false
    MetricStat:
      Stat: p99
      Period: 60
      Metric: { Namespace: Test, MetricName: Late, Dimensions: [{ Name: Function, Value: b }] }
EvaluationPeriods: 3
DatapointsToAlarm: 2
Threshold: 1000
ComparisonOperator: GreaterThanThreshold
TreatMissingData: notBreaching
"#,
    );
    let alarm = alarm_from_properties(&properties, &plain);
    assert_eq!(
        (
            alarm.datapoints_to_alarm,
            alarm.evaluation_periods,
            alarm.period_minutes
        ),
        (2, 3, 1)
    );
    let late_b = MetricId::new("Test", "Late", &[("Function", "b")]);
    let mut samples = Samples::new();
    for minute in 0..20 {
        let slow = if minute == 5 || minute == 7 {
            1500.0
        } else {
            20.0
        };
        samples.put_all(&late_b, minute, [20.0, slow]);
    }
    assert_eq!(
        alarm.evaluate(&samples, 0..20).alarms(),
        [8],
        "2 of 3: minutes 5 and 7"
    );
}

#[test]
fn a_single_metric_alarm_defaults_m_to_n_and_missing_to_missing() {
    let properties = yaml(
        r#"
AlarmName: koe-errors
Namespace: AWS/Lambda
MetricName: Errors
Dimensions: [{ Name: FunctionName, Value: f }]
ExtendedStatistic: p90
Period: 300
EvaluationPeriods: 2
Threshold: 1
ComparisonOperator: GreaterThanOrEqualToThreshold
"#,
    );
    let alarm = alarm_from_properties(&properties, &plain);
    assert_eq!(alarm.datapoints_to_alarm, 2);
    assert_eq!(alarm.period_minutes, 5);
    assert_eq!(alarm.missing_data, MissingData::Missing);
    assert_eq!(
        alarm.metric_stats().next().unwrap().statistic,
        Statistic::Percentile(90.0)
    );
    let none = alarm.evaluate(&Samples::new(), 0..60);
    assert_eq!(none.state_at(59), State::InsufficientData);
}

#[test]
#[should_panic(expected = "unsupported alarm property EvaluateLowSampleCountPercentile")]
fn an_unmodelled_property_panics() {
    let properties = yaml(
        "AlarmName: x\nEvaluateLowSampleCountPercentile: ignore\nNamespace: A\nMetricName: B\n",
    );
    alarm_from_properties(&properties, &plain);
}
