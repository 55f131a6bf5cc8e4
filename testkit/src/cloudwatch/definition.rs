//! An `AWS::CloudWatch::Alarm`'s `Properties` (as `template.yaml` holds them) read into an [`Alarm`]; unknown keys panic.

use std::collections::BTreeMap;

use serde_norway::Value;

use super::{Alarm, Comparison, Expression, MetricId, MetricStat, MissingData, Query, Statistic};

/// Turns a template value (a plain string, or `!Sub`, `!Ref`, `!GetAtt`) into the text the alarm
/// would see. The caller decides how symbolic a resource's name is.
pub type Resolve<'a> = &'a dyn Fn(&Value) -> String;

const ALARM_KEYS: [&str; 17] = [
    "AlarmName",
    "AlarmDescription",
    "ActionsEnabled",
    "AlarmActions",
    "OKActions",
    "InsufficientDataActions",
    "Namespace",
    "MetricName",
    "Dimensions",
    "Statistic",
    "ExtendedStatistic",
    "Period",
    "EvaluationPeriods",
    "DatapointsToAlarm",
    "Threshold",
    "ComparisonOperator",
    "TreatMissingData",
];

fn number(properties: &Value, key: &str, at: &str) -> f64 {
    properties[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{at}: {key} is not a number: {:?}", properties[key]))
}

fn keys(value: &Value) -> Vec<String> {
    value
        .as_mapping()
        .map(|m| {
            m.keys()
                .map(|k| k.as_str().unwrap_or("?").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn period_minutes(seconds: f64, at: &str) -> u32 {
    assert!(
        seconds >= 60.0 && seconds % 60.0 == 0.0,
        "{at}: period {seconds} s: only whole minutes are modelled"
    );
    (seconds / 60.0) as u32
}

fn metric(value: &Value, resolve: Resolve) -> MetricId {
    let dimensions: Vec<(String, String)> = value["Dimensions"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|d| (resolve(&d["Name"]), resolve(&d["Value"])))
        .collect();
    let dimensions: Vec<(&str, &str)> = dimensions
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    MetricId::new(
        &resolve(&value["Namespace"]),
        &resolve(&value["MetricName"]),
        &dimensions,
    )
}

/// The alarm an `AWS::CloudWatch::Alarm` resource's `Properties` define.
pub fn alarm_from_properties(properties: &Value, resolve: Resolve) -> Alarm {
    let name = resolve(&properties["AlarmName"]);
    let at = name.as_str();
    for key in keys(properties) {
        if key == "Metrics" {
            continue;
        }
        assert!(
            ALARM_KEYS.contains(&key.as_str()),
            "{at}: unsupported alarm property {key}"
        );
    }
    let mut queries = BTreeMap::new();
    let mut returned = Vec::new();
    let alarm_period;
    if let Some(metrics) = properties["Metrics"].as_sequence() {
        assert!(
            properties["MetricName"].is_null() && properties["Period"].is_null(),
            "{at}: Metrics and MetricName/Period together"
        );
        let mut periods = Vec::new();
        for query in metrics {
            for key in keys(query) {
                assert!(
                    [
                        "Id",
                        "Expression",
                        "Label",
                        "ReturnData",
                        "MetricStat",
                        "Period"
                    ]
                    .contains(&key.as_str()),
                    "{at}: unsupported Metrics key {key}"
                );
            }
            let id = query["Id"].as_str().expect("a query has an Id").to_owned();
            if query["ReturnData"].as_bool().unwrap_or(true) {
                returned.push(id.clone());
            }
            let parsed = match (query["Expression"].as_str(), &query["MetricStat"]) {
                (Some(text), Value::Null) => Query::Expression(Expression::parse(text)),
                (None, stat) if stat.is_mapping() => {
                    for key in keys(stat) {
                        assert!(
                            ["Metric", "Stat", "Period"].contains(&key.as_str()),
                            "{at}: unsupported MetricStat key {key}"
                        );
                    }
                    for key in keys(&stat["Metric"]) {
                        assert!(
                            ["Namespace", "MetricName", "Dimensions"].contains(&key.as_str()),
                            "{at}: unsupported Metric key {key}"
                        );
                    }
                    let period = period_minutes(number(stat, "Period", at), at);
                    periods.push(period);
                    Query::Stat(MetricStat {
                        metric: metric(&stat["Metric"], resolve),
                        statistic: Statistic::parse(
                            stat["Stat"].as_str().expect("a MetricStat has a Stat"),
                        ),
                        period_minutes: period,
                    })
                }
                _ => panic!("{at}: query {id} needs exactly one of Expression and MetricStat"),
            };
            queries.insert(id, parsed);
        }
        periods.dedup();
        let [period] = periods[..] else {
            panic!("{at}: the metrics of an alarm share one period: {periods:?}")
        };
        alarm_period = period;
    } else {
        let statistic = match (
            properties["Statistic"].as_str(),
            properties["ExtendedStatistic"].as_str(),
        ) {
            (Some(s), None) | (None, Some(s)) => Statistic::parse(s),
            _ => panic!("{at}: exactly one of Statistic and ExtendedStatistic"),
        };
        alarm_period = period_minutes(number(properties, "Period", at), at);
        queries.insert(
            "m1".to_owned(),
            Query::Stat(MetricStat {
                metric: metric(properties, resolve),
                statistic,
                period_minutes: alarm_period,
            }),
        );
        returned.push("m1".to_owned());
    }
    let [returned] = &returned[..] else {
        panic!("{at}: exactly one query returns data: {returned:?}")
    };
    let threshold = number(properties, "Threshold", at);
    let evaluation_periods = number(properties, "EvaluationPeriods", at) as u32;
    let datapoints_to_alarm = properties["DatapointsToAlarm"]
        .as_f64()
        .map_or(evaluation_periods, |m| m as u32);
    assert!(
        (1..=evaluation_periods).contains(&datapoints_to_alarm),
        "{at}: DatapointsToAlarm {datapoints_to_alarm} of {evaluation_periods}"
    );
    Alarm {
        name,
        queries,
        returned: returned.clone(),
        period_minutes: alarm_period,
        evaluation_periods,
        datapoints_to_alarm,
        threshold,
        comparison: Comparison::parse(
            properties["ComparisonOperator"]
                .as_str()
                .expect("a ComparisonOperator"),
        ),
        missing_data: properties["TreatMissingData"]
            .as_str()
            .map_or(MissingData::Missing, MissingData::parse),
    }
}
