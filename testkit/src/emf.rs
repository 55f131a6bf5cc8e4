//! The CloudWatch embedded metric format, checked as its specification states it (written from
//! the specification, not from the code that writes our lines): a test parses every line a
//! function wrote with [`parse`] and sums its metrics with [`Emf::total`].
//!
//! The rules (CloudWatch User Guide, "Specification: Embedded metric format"): the root object
//! has an `_aws` object holding `Timestamp` (milliseconds since the epoch) and
//! `CloudWatchMetrics`, an array of directives; each directive has a `Namespace` (1 to 1024
//! characters), `Dimensions` (an array of dimension sets, each an array of at most 30 member
//! names) and `Metrics` (at most 100 definitions: `Name`, an optional `Unit` from CloudWatch's
//! list, an optional `StorageResolution` of 1 or 60). Every dimension a set names is a root
//! member holding a string (at most 1024 characters); every metric a directive names is a root
//! member holding a number or an array of at most 100 numbers.

use std::collections::BTreeMap;

use serde_json::Value;

/// CloudWatch's units.
pub const UNITS: &[&str] = &[
    "Seconds",
    "Microseconds",
    "Milliseconds",
    "Bytes",
    "Kilobytes",
    "Megabytes",
    "Gigabytes",
    "Terabytes",
    "Bits",
    "Kilobits",
    "Megabits",
    "Gigabits",
    "Terabits",
    "Percent",
    "Count",
    "Bytes/Second",
    "Kilobytes/Second",
    "Megabytes/Second",
    "Gigabytes/Second",
    "Terabytes/Second",
    "Bits/Second",
    "Kilobits/Second",
    "Megabits/Second",
    "Gigabits/Second",
    "Terabits/Second",
    "Count/Second",
    "None",
];

/// One metric of one line: its directive's namespace, the dimension values it is published
/// under (per dimension set), its unit and its values.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub namespace: String,
    pub name: String,
    pub unit: Option<String>,
    pub dimensions: Vec<BTreeMap<String, String>>,
    pub values: Vec<f64>,
}

/// A line's metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Emf {
    pub timestamp_ms: i64,
    pub metrics: Vec<Metric>,
}

/// `value` as an array, or an error naming `what`.
fn array<'a>(value: Option<&'a Value>, what: &str) -> Result<&'a Vec<Value>, String> {
    value
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{what} is not an array"))
}

/// Parses one log line as EMF, or says which rule it breaks.
pub fn parse(line: &str) -> Result<Emf, String> {
    let root: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let root = root.as_object().ok_or("the root is not an object")?;
    let aws = root
        .get("_aws")
        .and_then(Value::as_object)
        .ok_or("no `_aws` object")?;
    let timestamp_ms = aws
        .get("Timestamp")
        .and_then(Value::as_i64)
        .filter(|t| *t >= 0)
        .ok_or("`_aws.Timestamp` is not a non-negative integer")?;
    let directives = array(aws.get("CloudWatchMetrics"), "`_aws.CloudWatchMetrics`")?;
    let mut metrics = Vec::new();
    for directive in directives {
        let namespace = directive
            .get("Namespace")
            .and_then(Value::as_str)
            .filter(|n| (1..=1024).contains(&n.chars().count()))
            .ok_or("a directive's `Namespace` is not a string of 1 to 1024 characters")?;
        let sets = array(directive.get("Dimensions"), "a directive's `Dimensions`")?;
        let mut dimensions = Vec::new();
        for set in sets {
            let set = set.as_array().ok_or("a dimension set is not an array")?;
            if set.len() > 30 {
                return Err("a dimension set names more than 30 dimensions".into());
            }
            let mut values = BTreeMap::new();
            for name in set {
                let name = name.as_str().ok_or("a dimension name is not a string")?;
                let value = root
                    .get(name)
                    .and_then(Value::as_str)
                    .filter(|v| v.chars().count() <= 1024)
                    .ok_or(format!("dimension `{name}` is not a root string member"))?;
                values.insert(name.to_owned(), value.to_owned());
            }
            dimensions.push(values);
        }
        let definitions = array(directive.get("Metrics"), "a directive's `Metrics`")?;
        if definitions.len() > 100 {
            return Err("a directive defines more than 100 metrics".into());
        }
        for definition in definitions {
            let name = definition
                .get("Name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or("a metric definition has no `Name`")?;
            let unit = match definition.get("Unit") {
                None => None,
                Some(unit) => Some(
                    unit.as_str()
                        .filter(|u| UNITS.contains(u))
                        .ok_or(format!(
                            "metric `{name}` has a unit CloudWatch does not know"
                        ))?
                        .to_owned(),
                ),
            };
            if let Some(resolution) = definition.get("StorageResolution")
                && resolution.as_i64() != Some(1)
                && resolution.as_i64() != Some(60)
            {
                return Err(format!(
                    "metric `{name}`'s StorageResolution is not 1 or 60"
                ));
            }
            let values = match root.get(name) {
                Some(Value::Number(n)) => vec![n.as_f64().unwrap()],
                Some(Value::Array(values)) if values.len() <= 100 => values
                    .iter()
                    .map(Value::as_f64)
                    .collect::<Option<Vec<f64>>>()
                    .ok_or(format!("metric `{name}` has a value that is not a number"))?,
                Some(Value::Array(_)) => {
                    return Err(format!("metric `{name}` has more than 100 values"));
                }
                _ => return Err(format!("metric `{name}` is not a root number member")),
            };
            metrics.push(Metric {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                unit,
                dimensions: dimensions.clone(),
                values,
            });
        }
    }
    Ok(Emf {
        timestamp_ms,
        metrics,
    })
}

/// Parses every line; panics naming the first that is not EMF.
pub fn parse_all<S: AsRef<str>>(lines: &[S]) -> Vec<Emf> {
    lines
        .iter()
        .map(|l| parse(l.as_ref()).unwrap_or_else(|e| panic!("not EMF ({e}): {}", l.as_ref())))
        .collect()
}

impl Metric {
    /// Whether the metric is published with dimension `name` = `value`.
    pub fn has_dimension(&self, name: &str, value: &str) -> bool {
        self.dimensions
            .iter()
            .any(|set| set.get(name).is_some_and(|v| v == value))
    }
}

/// Every value of `namespace`/`name` across `lines`, in order.
pub fn values(lines: &[Emf], namespace: &str, name: &str) -> Vec<f64> {
    lines
        .iter()
        .flat_map(|l| &l.metrics)
        .filter(|m| m.namespace == namespace && m.name == name)
        .flat_map(|m| m.values.iter().copied())
        .collect()
}

/// The sum of every value of `namespace`/`name` across `lines`.
pub fn total(lines: &[Emf], namespace: &str, name: &str) -> f64 {
    values(lines, namespace, name).iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The specification's own example.
    const SPEC_EXAMPLE: &str = r#"{
      "_aws": {
        "Timestamp": 1574109732004,
        "CloudWatchMetrics": [
          {
            "Namespace": "lambda-function-metrics",
            "Dimensions": [["functionVersion"]],
            "Metrics": [{"Name": "time", "Unit": "Milliseconds", "StorageResolution": 60}]
          }
        ]
      },
      "functionVersion": "$LATEST",
      "time": 100,
      "requestId": "989ffbf8-9ace-4817-a57c-e4dd734019ee"
    }"#;

    #[test]
    fn the_specifications_example_parses() {
        let emf = parse(SPEC_EXAMPLE).unwrap();
        assert_eq!(emf.timestamp_ms, 1574109732004);
        assert_eq!(emf.metrics.len(), 1);
        let time = &emf.metrics[0];
        assert_eq!(
            (time.namespace.as_str(), time.name.as_str()),
            ("lambda-function-metrics", "time")
        );
        assert_eq!(time.values, [100.0]);
        assert!(time.has_dimension("functionVersion", "$LATEST"));
    }

    #[test]
    fn lines_that_break_a_rule_are_refused_with_the_rule() {
        let broken = |from: &str, to: &str| {
            let line = SPEC_EXAMPLE.replacen(from, to, 1);
            assert_ne!(line, SPEC_EXAMPLE, "{from}");
            parse(&line).unwrap_err()
        };
        assert!(broken(r#""time": 100"#, r#""time": "100""#).contains("`time`"));
        assert!(broken(r#""functionVersion": "$LATEST""#, r#""fv": 1"#).contains("dimension"));
        assert!(broken("Milliseconds", "Millis").contains("unit"));
        assert!(broken("\"StorageResolution\": 60", "\"StorageResolution\": 5").contains("60"));
        assert!(broken("1574109732004", "\"now\"").contains("Timestamp"));
        assert!(broken("lambda-function-metrics", "").contains("Namespace"));
        assert!(broken("\"_aws\"", "\"aws\"").contains("_aws"));
        let many: Vec<String> = (0..101).map(|i| i.to_string()).collect();
        let line = SPEC_EXAMPLE.replace(
            r#""time": 100"#,
            &format!(r#""time": [{}]"#, many.join(",")),
        );
        assert!(parse(&line).unwrap_err().contains("100 values"));
        let metrics: Vec<String> = (0..101)
            .map(|i| format!(r#"{{"Name": "time{i}"}}"#))
            .collect();
        let line = SPEC_EXAMPLE.replace(
            r#"[{"Name": "time", "Unit": "Milliseconds", "StorageResolution": 60}]"#,
            &format!("[{}]", metrics.join(",")),
        );
        assert!(parse(&line).unwrap_err().contains("100 metrics"));
    }
}
