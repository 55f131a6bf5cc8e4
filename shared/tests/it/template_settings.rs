//! Settings derived, not listed by hand: each function of `template.yaml` is started as deployed
//! (`koe::app::wiring::variables_read`: its environment from the template at the parameters'
//! defaults, every secret stored) and records every variable its configuration looks up. Each
//! one the template does not give it is a default the template means ([`DEFAULT_IS_INTENT`],
//! each with its reason), or the test fails naming the function and the variable; and each
//! variable the template gives a function is one its code reads.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use koe::app::ports::Served;
use koe::app::wiring::variables_read;
use koe::app::{STREAMED, Visit};
use koe::platform::secrets::{SECRET_VARS, SecretError, SecretSource};
use koe_testkit::template::load_yaml;
use serde_norway::Value;

/// What Lambda itself sets in every function's environment (AWS, "Defined runtime environment
/// variables").
const SET_BY_LAMBDA: &[&str] = &[
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

/// The dispatch functions that run minutes (the route's function only hands runs over).
const RUNS: &[&str] = &["DispatchFunction", "DispatchPartFunction"];

/// Variables a function reads and the template leaves unset on purpose: the code's default is
/// what the template means. `(variable, the functions it applies to (empty: every one), why)`.
const DEFAULT_IS_INTENT: &[(&str, &[&str], &str)] = &[
    (
        "METRICS",
        &[],
        "metrics are on (EMF to stdout); `off` is for tests",
    ),
    (
        "KOE_TEST_CLOCK_OFFSET_DAYS",
        &[],
        "read by debug builds only (the fixture test)",
    ),
    (
        "APNS_ENDPOINT",
        &[],
        "loopback APNs stand-ins only, never deployed",
    ),
    (
        "APNS_MAX_CONNECTIONS",
        &[],
        "8 connections carry a crowded second (benchmarks.md)",
    ),
    (
        "CALL_CONFIRM_WAIT_MS",
        &[],
        "the contract's default (5,000 ms), the same in every function",
    ),
    (
        "CALL_MAX_PUSHES",
        &[],
        "the contract's default (3), the same in every function",
    ),
    (
        "DISPATCH_STORE_CONCURRENCY",
        &[],
        "follows the function's memory (dispatch.md)",
    ),
    (
        "DISPATCH_CONCURRENCY",
        &[
            "CreateCallFunction",
            "GetCallFunction",
            "CancelCallFunction",
            "ConfirmCallFunction",
            "DispatchRouteFunction",
        ],
        "runs no minute",
    ),
    (
        "DISPATCH_CALLS_PER_WORKER",
        &[
            "CreateCallFunction",
            "GetCallFunction",
            "CancelCallFunction",
            "ConfirmCallFunction",
            "DispatchRouteFunction",
        ],
        "runs no minute",
    ),
    (
        "DISPATCH_MAX_WORKERS",
        &[
            "CreateCallFunction",
            "GetCallFunction",
            "CancelCallFunction",
            "ConfirmCallFunction",
            "DispatchRouteFunction",
        ],
        "runs no minute",
    ),
    (
        "DISPATCH_WRITE_BUDGET",
        &[
            "GetCallFunction",
            "CancelCallFunction",
            "ConfirmCallFunction",
            "DispatchRouteFunction",
        ],
        "plans no minute's writes",
    ),
    (
        "DISPATCH_TABLE_WRITE_QUOTA",
        &[
            "GetCallFunction",
            "CancelCallFunction",
            "ConfirmCallFunction",
            "DispatchRouteFunction",
        ],
        "plans no minute's writes",
    ),
    (
        "AWS_ENDPOINT_URL",
        &[],
        "stand-ins of local invocations only; deployed: AWS's endpoints",
    ),
    (
        "AWS_ENDPOINT_URL_EVENTBRIDGE",
        &[],
        "stand-ins of local invocations only",
    ),
    (
        "CHAT_DAILY_TOKEN_CEILING",
        &["AgentFunction"],
        "its spend guard counts the agent API's",
    ),
    (
        "AGENT_DAILY_TOKEN_CEILING",
        &["ChatFunction", "ChatStreamFunction"],
        "its spend guard counts the chat API's",
    ),
    (
        "APNS_KEY_P8",
        &["DispatchRouteFunction"],
        "PUSH_SENDER=log: it sends no push",
    ),
    (
        "DISPATCH_OIDC_JWKS_URL",
        RUNS,
        "serves no route: POST /internal/dispatch has its own function",
    ),
    ("DISPATCH_OIDC_ISSUER", RUNS, "serves no route"),
    ("DISPATCH_OIDC_AUDIENCE", RUNS, "serves no route"),
    ("DISPATCH_OIDC_SERVICE_ACCOUNT", RUNS, "serves no route"),
];

/// The table variables, each with its table's logical id: a function whose role may not touch
/// the table never uses its name (the store reads all three names).
const TABLES: &[(&str, &str)] = &[
    ("DEVICES_TABLE", "DevicesTable"),
    ("CALLS_TABLE", "CallsTable"),
    ("AGENT_USAGE_TABLE", "AgentUsageTable"),
];

fn intended_default(template: &Value, function: &str, var: &str) -> bool {
    if let Some((_, table)) = TABLES.iter().find(|(v, _)| *v == var) {
        let policies = &template["Resources"][function]["Properties"]["Policies"];
        let policies = serde_norway::to_string(policies).unwrap();
        return !policies.contains(table);
    }
    DEFAULT_IS_INTENT
        .iter()
        .any(|(v, only, _)| *v == var && (only.is_empty() || only.contains(&function)))
}

/// Parameters a deploy sets: the APNs ids, as docs/deploy.md's production line sets them (the
/// parameters' defaults leave them empty).
const APNS_IDS: &[(&str, &str)] = &[
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
            true if self.apns_key => include_str!("../../../testkit/keys/apns-test.p8").to_owned(),
            true => koe::platform::secrets::NOT_SET.to_owned(),
            false => format!("{arn}-a-stored-value-long-enough-for-every-check-0123456789"),
        })
    }
}

type Check = Box<
    dyn Fn(
        BTreeMap<String, String>,
    ) -> std::pin::Pin<
        Box<
            dyn Future<
                Output = (
                    BTreeSet<String>,
                    Result<(), koe::platform::config::ConfigError>,
                ),
            >,
        >,
    >,
>;

fn check_for<E: Served>() -> Check {
    Box::new(|env| {
        Box::pin(async move {
            let vars = koe::platform::config::Vars::from_map(env.into_iter().collect());
            variables_read::<E>(vars, Arc::new(Stored { apns_key: true })).await
        })
    })
}

/// Each template function's start-up, by its logical id.
fn start_ups() -> BTreeMap<&'static str, Check> {
    struct Collect(BTreeMap<&'static str, Check>);
    impl Visit for Collect {
        fn visit<E: Served>(&mut self) {
            self.0.insert(E::ROUTE.function, check_for::<E>());
        }
    }
    let mut collect = Collect(BTreeMap::new());
    koe::app::each(&mut collect);
    for function in RUNS {
        collect
            .0
            .insert(function, check_for::<koe::dispatch::api::Dispatch>());
    }
    assert_eq!(STREAMED.len(), 1);
    collect.0.insert(
        STREAMED[0].route.function,
        check_for::<koe::chat::api::ChatStream>(),
    );
    collect.0
}

/// Per function: what it reads and the template does not give it (beyond intended defaults),
/// and what the template gives it that it never reads.
async fn gaps(template: &Value) -> BTreeMap<String, (Vec<String>, Vec<String>)> {
    let start_ups = start_ups();
    let functions = koe_testkit::template::resources_of_type(template, "AWS::Serverless::Function");
    let globals: BTreeSet<String> = template["Globals"]["Function"]["Environment"]["Variables"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect();
    let mut out = BTreeMap::new();
    for id in &functions {
        let start = start_ups
            .get(id.as_str())
            .unwrap_or_else(|| panic!("{id}: no endpoint starts it"));
        let env = environment(template, id, APNS_IDS);
        let given: BTreeSet<String> = env.keys().cloned().collect();
        let (read, started) = start(env).await;
        started.unwrap_or_else(|e| panic!("{id} does not start as the template deploys it: {e}"));
        let missing: Vec<String> = read
            .iter()
            .filter(|var| !given.contains(*var) && !intended_default(template, id, var))
            // A secret the function has no ARN for is one it does not hold...
            .filter(|var| !SECRET_VARS.iter().any(|(_, arn)| arn == var))
            // ...and one it reads it must hold.
            .filter(|var| {
                SECRET_VARS
                    .iter()
                    .find(|(secret, _)| secret == var)
                    .is_none_or(|(_, arn)| !given.contains(*arn))
            })
            .cloned()
            .collect();
        let own: Vec<String> = given
            .iter()
            .filter(|var| !globals.contains(*var) && !SET_BY_LAMBDA.contains(&var.as_str()))
            .filter(|var| !read.contains(*var))
            .cloned()
            .collect();
        out.insert(id.clone(), (missing, own));
    }
    out
}

#[tokio::test]
async fn each_function_gets_every_variable_its_configuration_reads() {
    let template = load_yaml("template.yaml");
    let mut problems = Vec::new();
    for (id, (missing, unread)) in gaps(&template).await {
        for var in missing {
            problems.push(format!(
                "{id} reads {var}, which template.yaml does not give it (set it, or say why its \
                 default is meant in DEFAULT_IS_INTENT)"
            ));
        }
        for var in unread {
            problems.push(format!("{id} is given {var}, which its code never reads"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The warm throughput a deploy buys reaches every function that plans writes with it.
#[tokio::test]
async fn the_write_budget_follows_the_warm_throughput_everywhere_it_is_planned() {
    let template = load_yaml("template.yaml");
    for id in [
        "CreateCallFunction",
        "DispatchFunction",
        "DispatchPartFunction",
    ] {
        let env = environment(&template, id, &[]);
        assert_eq!(
            env.get("DISPATCH_WRITE_BUDGET").map(String::as_str),
            Some("4000"),
            "{id}"
        );
        assert_eq!(
            env.get("DISPATCH_TABLE_WRITE_QUOTA").map(String::as_str),
            Some("40000"),
            "{id}"
        );
    }
}

/// The test sees a variable the template takes away: DISPATCH_WRITE_BUDGET gone from the dispatch
/// function is named.
#[tokio::test]
async fn a_function_that_loses_a_variable_is_named() {
    let mut template = load_yaml("template.yaml");
    let variables =
        template["Resources"]["DispatchFunction"]["Properties"]["Environment"]["Variables"]
            .as_mapping_mut()
            .unwrap();
    assert!(variables.remove("DISPATCH_WRITE_BUDGET").is_some());
    let gaps = gaps(&template).await;
    assert_eq!(gaps["DispatchFunction"].0, ["DISPATCH_WRITE_BUDGET"]);
}
