//! A function's environment as `template.yaml` deploys it (parameters at their defaults, what
//! Lambda sets, every secret stored): what `template_settings.rs` starts each function with, and
//! what docs-tables records the settings table from.

use std::collections::BTreeMap;

use async_trait::async_trait;
use koe::platform::secrets::{SecretError, SecretSource};
use serde_norway::Value;

/// What Lambda itself sets in every function's environment (AWS, "Defined runtime environment
/// variables").
pub const SET_BY_LAMBDA: &[&str] = &[
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "AWS_LAMBDA_FUNCTION_VERSION",
    "AWS_LAMBDA_LOG_GROUP_NAME",
    "AWS_LAMBDA_LOG_STREAM_NAME",
    "AWS_LAMBDA_RUNTIME_API",
    "AWS_LAMBDA_INITIALIZATION_TYPE",
];

/// Parameters a deploy sets: the APNs ids, as docs/deploy.md's production line sets them (the
/// parameters' defaults leave them empty).
pub const APNS_IDS: &[(&str, &str)] = &[
    ("ApnsKeyId", "ABCDE12345"),
    ("ApnsTeamId", "FGHIJ67890"),
    ("ApnsBundleId", "com.example.koe"),
];

/// A function's environment as deployed with `parameters` (the rest at their defaults), with
/// what Lambda sets: a `!Ref` to a parameter is its value, to a resource a name standing for
/// it; `!If` follows its condition.
pub fn environment(
    template: &Value,
    id: &str,
    parameters: &[(&str, &str)],
) -> BTreeMap<String, String> {
    let mut template = template.clone();
    for (name, value) in parameters {
        let parameter = &mut template["Parameters"][*name];
        assert!(!parameter.is_null(), "no parameter {name}");
        parameter["Default"] = Value::String((*value).to_owned());
    }
    let template = &template;
    let mut env = BTreeMap::new();
    let globals = &template["Globals"]["Function"]["Environment"]["Variables"];
    let own = &template["Resources"][id]["Properties"]["Environment"]["Variables"];
    for variables in [globals, own] {
        for (name, value) in variables.as_mapping().into_iter().flatten() {
            env.insert(name.as_str().unwrap().to_owned(), resolve(template, value));
        }
    }
    for var in SET_BY_LAMBDA {
        env.insert((*var).to_owned(), "set-by-lambda".to_owned());
    }
    env.insert("AWS_REGION".into(), "ap-northeast-1".into());
    env.insert("AWS_LAMBDA_FUNCTION_MEMORY_SIZE".into(), "256".into());
    env
}

pub fn resolve(template: &Value, value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Tagged(t) if t.tag == "Ref" => {
            let name = t.value.as_str().unwrap();
            match &template["Parameters"][name]["Default"] {
                Value::Null => format!("stand-in:{name}"),
                default => resolve(template, default),
            }
        }
        Value::Tagged(t) if t.tag == "If" => {
            let branches = t.value.as_sequence().unwrap();
            let condition = branches[0].as_str().unwrap();
            let holds = condition_holds(template, &template["Conditions"][condition]);
            resolve(template, &branches[if holds { 1 } else { 2 }])
        }
        Value::Tagged(t) if t.tag == "Sub" => t
            .value
            .as_str()
            .unwrap()
            .replace("${AWS::StackName}", "koe"),
        other => panic!("a variable's value the test does not resolve: {other:?}"),
    }
}

fn condition_holds(template: &Value, condition: &Value) -> bool {
    let Value::Tagged(t) = condition else {
        panic!("a condition: {condition:?}")
    };
    let args = t.value.as_sequence();
    match t.tag.to_string().trim_start_matches('!') {
        "Not" => !condition_holds(template, &args.unwrap()[0]),
        "Or" => args.unwrap().iter().any(|c| condition_holds(template, c)),
        "And" => args.unwrap().iter().all(|c| condition_holds(template, c)),
        "Condition" => {
            condition_holds(template, &template["Conditions"][t.value.as_str().unwrap()])
        }
        "Equals" => {
            let args = args.unwrap();
            resolve(template, &args[0]) == resolve(template, &args[1])
        }
        other => panic!("condition function {other}"),
    }
}

/// Every secret stored (the APNs key a real one, testkit's, unless `apns_key` is false: then it
/// holds the stack's first value, read as unset), the rest any value.
pub struct Stored {
    pub apns_key: bool,
}

#[async_trait]
impl SecretSource for Stored {
    async fn read(&self, arn: &str) -> Result<String, SecretError> {
        Ok(match arn.ends_with("ApnsKeySecret") {
            true if self.apns_key => include_str!("../keys/apns-test.p8").to_owned(),
            true => koe::platform::secrets::NOT_SET.to_owned(),
            false => format!("{arn}-a-stored-value-long-enough-for-every-check-0123456789"),
        })
    }
}
