//! Settings derived, not listed by hand: each function of `template.yaml` is started as deployed
//! (`koe::app::wiring::variables_read`: its environment from the template at the parameters'
//! defaults, every secret stored) and records every variable its configuration looks up. Each
//! one the template does not give it is a default the template means ([`DEFAULT_IS_INTENT`],
//! each with its reason), or the test fails naming the function and the variable; and each
//! variable the template gives a function is one its code reads.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use koe::app::ports::Served;
use koe::app::wiring::variables_read;
use koe::app::{STREAMED, Visit};
use koe::platform::secrets::SECRET_VARS;
pub use koe_testkit::deployed::{APNS_IDS, SET_BY_LAMBDA, Stored, environment, resolve};
use koe_testkit::template::load_yaml;
use serde_norway::Value;

/// The dispatch functions that run minutes (the route's function only hands runs over).
const RUNS: &[&str] = &["DispatchFunction", "DispatchPartFunction"];

/// The call functions and the dispatch route's, which read the dispatch settings but run no
/// minute.
const NO_MINUTE: &[&str] = &[
    "CreateCallFunction",
    "GetCallFunction",
    "CancelCallFunction",
    "ConfirmCallFunction",
    "DispatchRouteFunction",
];

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
    ("DISPATCH_CONCURRENCY", NO_MINUTE, "runs no minute"),
    ("DISPATCH_CALLS_PER_WORKER", NO_MINUTE, "runs no minute"),
    ("DISPATCH_MAX_WORKERS", NO_MINUTE, "runs no minute"),
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
