//! The template's alarms and dashboard against what the code emits: every alarm sends its ALARM
//! and OK to the alarm topic, and the alarms and the dashboard name only metrics of
//! `koe::platform::metrics::catalogue`, under its dimensions, of the stack's own functions (as the route
//! table is held against the template).

use koe::platform::metrics::catalogue;

fn template() -> serde_norway::Value {
    koe_testkit::template::load_yaml("template.yaml")
}

fn resources_of(template: &serde_norway::Value, kind: &str) -> Vec<(String, serde_norway::Value)> {
    template["Resources"]
        .as_mapping()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == kind)
        .map(|(id, r)| (id.as_str().unwrap().to_owned(), r.clone()))
        .collect()
}

/// A `!Ref`'s or `!Sub`'s text (`Ref x` as "x"), or a plain string.
fn text_of(value: &serde_norway::Value) -> String {
    match value {
        serde_norway::Value::Tagged(tagged) => text_of(&tagged.value),
        serde_norway::Value::String(s) => s.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

/// The functions' names as the template gives them (`${AWS::StackName}-chat`, ...).
fn function_names(template: &serde_norway::Value) -> Vec<String> {
    resources_of(template, "AWS::Serverless::Function")
        .iter()
        .map(|(_, f)| text_of(&f["Properties"]["FunctionName"]))
        .collect()
}

/// A metric of ours named by the template: in the catalogue, under its dimension names, and
/// its `Function` one of the stack's functions.
fn check_ours(
    namespace: &str,
    name: &str,
    dimensions: &[(String, String)],
    functions: &[String],
    at: &str,
) {
    if !namespace.starts_with("Koe/") {
        return;
    }
    let known = catalogue::find(namespace, name)
        .unwrap_or_else(|| panic!("{at}: {namespace}/{name} is not a metric the code emits"));
    let names: Vec<&str> = dimensions.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, known.dimensions, "{at}: {name}'s dimensions");
    for (dimension, value) in dimensions {
        // (A SEARCH term names dimensions, not their values.)
        if dimension == "Function" && !value.is_empty() {
            assert!(
                functions.contains(value),
                "{at}: {name} of {value}, not a function of the stack"
            );
        }
    }
}

#[test]
fn every_alarm_reaches_the_alarm_topic_and_names_only_emitted_metrics() {
    let template = template();
    let functions = function_names(&template);
    let alarms = resources_of(&template, "AWS::CloudWatch::Alarm");
    assert!(alarms.len() >= 14, "{} alarms", alarms.len());
    let mut ours = 0;
    for (id, alarm) in &alarms {
        let properties = &alarm["Properties"];
        for actions in ["AlarmActions", "OKActions"] {
            let targets: Vec<String> = properties[actions]
                .as_sequence()
                .unwrap_or_else(|| panic!("{id} has no {actions}"))
                .iter()
                .map(text_of)
                .collect();
            assert_eq!(targets, ["AlarmTopic"], "{id}'s {actions}");
        }
        assert!(
            text_of(&properties["AlarmName"]).starts_with("${AWS::StackName}-"),
            "{id}: the team-chat rule matches alarms by the stack's name prefix"
        );
        let mut metrics = Vec::new();
        if let Some(name) = properties["MetricName"].as_str() {
            metrics.push((
                properties["Namespace"].clone(),
                name.to_owned(),
                properties["Dimensions"].clone(),
            ));
        }
        for query in properties["Metrics"].as_sequence().into_iter().flatten() {
            let metric = &query["MetricStat"]["Metric"];
            if let Some(name) = metric["MetricName"].as_str() {
                metrics.push((
                    metric["Namespace"].clone(),
                    name.to_owned(),
                    metric["Dimensions"].clone(),
                ));
            }
        }
        assert!(!metrics.is_empty(), "{id} watches no metric");
        for (namespace, name, dimensions) in metrics {
            let dimensions: Vec<(String, String)> = dimensions
                .as_sequence()
                .into_iter()
                .flatten()
                .map(|d| (text_of(&d["Name"]), text_of(&d["Value"])))
                .collect();
            let namespace = text_of(&namespace);
            ours += usize::from(namespace.starts_with("Koe/"));
            check_ours(&namespace, &name, &dimensions, &functions, id);
        }
    }
    assert!(
        ours >= 10,
        "the alarms watch the code's own metrics ({ours})"
    );
    // The ones the runbook promises.
    let names: Vec<String> = alarms
        .iter()
        .map(|(_, a)| text_of(&a["Properties"]["AlarmName"]))
        .collect();
    for promised in [
        "dispatch-lateness",
        "dispatch-failed",
        "dispatch-missed",
        "dispatch-push-unknown",
        "dispatch-silent",
        "chat-api-5xx",
        "agent-api-5xx",
        "chat-spend-80",
        "agent-spend-80",
    ] {
        assert!(
            names.contains(&format!("${{AWS::StackName}}-{promised}")),
            "no {promised} alarm"
        );
    }
}

#[test]
fn the_dashboard_names_only_metrics_the_code_emits() {
    let template = template();
    let functions = function_names(&template);
    let [(_, dashboard)] = resources_of(&template, "AWS::CloudWatch::Dashboard")
        .try_into()
        .unwrap();
    let body = text_of(&dashboard["Properties"]["DashboardBody"]);
    let body: serde_json::Value = serde_json::from_str(&body).expect("the body is JSON");
    let mut named = std::collections::BTreeSet::new();
    for widget in body["widgets"].as_array().unwrap() {
        let title = widget["properties"]["title"].as_str().unwrap_or("text");
        for entry in widget["properties"]["metrics"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let entry = entry.as_array().unwrap();
            if let Some(expression) = entry[0]["expression"].as_str() {
                for (namespace, dimensions, name) in search_terms(expression) {
                    let dimensions: Vec<(String, String)> =
                        dimensions.into_iter().map(|d| (d, String::new())).collect();
                    check_ours(&namespace, &name, &dimensions, &functions, title);
                    named.insert(format!("{namespace}/{name}"));
                }
                continue;
            }
            let strings: Vec<&str> = entry.iter().filter_map(|v| v.as_str()).collect();
            let (namespace, name) = (strings[0], strings[1]);
            let dimensions: Vec<(String, String)> = strings[2..]
                .chunks(2)
                .map(|pair| (pair[0].to_owned(), pair[1].to_owned()))
                .collect();
            check_ours(namespace, name, &dimensions, &functions, title);
            named.insert(format!("{namespace}/{name}"));
        }
    }
    for shown in [
        "Koe/Dispatch/PushLateness",
        "Koe/Dispatch/Sent",
        "Koe/Dispatch/StoreThrottles",
        "Koe/Dispatch/ApnsErrors",
        "Koe/Dispatch/RunDuration",
        "Koe/Api/Latency",
        "Koe/Api/ModelTokens",
        "Koe/Api/SpendUsed",
        "AWS/ApiGateway/5xx",
        "AWS/Lambda/ConcurrentExecutions",
    ] {
        assert!(named.contains(shown), "the dashboard does not show {shown}");
    }
}

/// The `{Namespace,Dimension,...} MetricName="Name"` terms of a SEARCH expression (its
/// template substitutions, `${...}`, left out).
fn search_terms(expression: &str) -> Vec<(String, Vec<String>, String)> {
    let mut plain = String::new();
    let mut rest = expression;
    while let Some(at) = rest.find("${") {
        plain.push_str(&rest[..at]);
        rest = &rest[at + rest[at..].find('}').unwrap() + 1..];
    }
    plain.push_str(rest);
    let mut found = Vec::new();
    for term in plain.split('{').skip(1) {
        let (schema, after) = term.split_once('}').unwrap();
        let mut schema = schema.split(',').map(str::trim);
        let namespace = schema.next().unwrap().to_owned();
        let dimensions: Vec<String> = schema.map(str::to_owned).collect();
        let name = after
            .split("MetricName=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or_else(|| panic!("a SEARCH without a MetricName: {expression}"))
            .to_owned();
        found.push((namespace, dimensions, name));
    }
    found
}
