//! docs/deploy.md's "Production and the APNs key", step by step, against the dispatch binary's
//! start-up (`App::deployed_with` and the `Dispatch` service, as `koe::app::lambda::start` runs
//! them) in the run and part functions, with template.yaml's environment: after the first
//! deploy (samconfig.toml's `prod` list), after each documented step in the documented order,
//! and in the other order. No step fails a start; while the key is stored and its ids are not,
//! each start writes `ApnsConfigIncomplete` (the `dispatch-apns-config` alarm pages).

use std::sync::Arc;

use koe::App;
use koe::dispatch::api::Dispatch;
use koe::platform::config::Vars;
use koe::platform::metrics::MemorySink;
use koe_testkit::template::{doc_section, load_yaml, repo_root};

use super::template_settings::{Stored, environment};

/// A step of the section: the key stored, or a deploy with a `parameter_overrides` line.
#[derive(Debug, Clone)]
enum Step {
    StoreKey,
    Deploy(Vec<(String, String)>),
}

fn pairs(list: &str) -> Vec<(String, String)> {
    list.trim_matches('"')
        .split_whitespace()
        .map(|pair| {
            let (name, value) = pair.split_once('=').expect("Name=value");
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

/// The section's steps in the order it shows them.
fn documented_steps() -> Vec<Step> {
    let section = doc_section("deploy.md", "Production and the APNs key");
    let mut steps = Vec::new();
    for line in section.lines() {
        if line.contains("put-secret-value") && line.contains("/apns-key-p8") {
            steps.push(Step::StoreKey);
        } else if let Some(list) = line.strip_prefix("parameter_overrides = ") {
            steps.push(Step::Deploy(pairs(list)));
        }
    }
    steps
}

/// samconfig.toml's `prod` parameter_overrides: the first deploy's.
fn first_deploy() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo_root().join("samconfig.toml")).unwrap();
    let prod = text.split("[prod.deploy.parameters]").nth(1).unwrap();
    let line = prod
        .lines()
        .find_map(|l| l.trim().strip_prefix("parameter_overrides = "))
        .expect("prod's parameter_overrides");
    pairs(line)
}

/// How a start went in each dispatch function that sends pushes.
#[derive(Debug, PartialEq)]
struct Started {
    /// `ApnsConfigIncomplete` records written.
    incomplete: usize,
}

async fn start(parameters: &[(String, String)], key_stored: bool) -> Vec<Started> {
    let template = load_yaml("template.yaml");
    let parameters: Vec<(&str, &str)> = parameters
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let mut out = Vec::new();
    for function in ["DispatchFunction", "DispatchPartFunction"] {
        let env = environment(&template, function, &parameters);
        let vars = Vars::from_map(env.into_iter().collect());
        let sink = MemorySink::default();
        let app = App::deployed_with(
            vars,
            Arc::new(Stored {
                apns_key: key_stored,
            }),
        )
        .await
        .unwrap_or_else(|e| panic!("{function}: its secrets: {e}"))
        .with_metrics(Arc::new(sink.clone()));
        if let Err(e) = app.service::<Dispatch>().await {
            panic!("{function} fails its start-up: {e}");
        }
        let incomplete = sink
            .lines()
            .iter()
            .filter(|l| l.contains("ApnsConfigIncomplete"))
            .count();
        out.push(Started { incomplete });
    }
    out
}

/// Walks `steps` from the first deploy; returns, per state (first deploy, then each step),
/// the `ApnsConfigIncomplete` records each function's start wrote.
async fn walk(steps: &[Step]) -> Vec<Vec<usize>> {
    let mut parameters = first_deploy();
    let mut key_stored = false;
    let mut states = vec![start(&parameters, key_stored).await];
    for step in steps {
        match step {
            Step::StoreKey => key_stored = true,
            Step::Deploy(list) => parameters = list.clone(),
        }
        states.push(start(&parameters, key_stored).await);
    }
    states
        .into_iter()
        .map(|s| s.into_iter().map(|f| f.incomplete).collect())
        .collect()
}

#[tokio::test]
async fn each_documented_apns_step_leaves_the_dispatcher_starting() {
    let steps = documented_steps();
    assert!(
        matches!(steps.as_slice(), [Step::StoreKey, Step::Deploy(_)]),
        "deploy.md: the key, then the ids: {steps:?}"
    );
    // First deploy: logged pushes, no page (no key yet). Key stored, ids not: starts, pages.
    // Both: APNs, no page.
    assert_eq!(walk(&steps).await, [[0, 0], [1, 1], [0, 0]]);
}

#[tokio::test]
async fn the_apns_steps_in_the_other_order_leave_it_starting_too() {
    let mut steps = documented_steps();
    steps.reverse();
    // Ids first: still no key, so logged pushes without a page; then the key: APNs.
    assert_eq!(walk(&steps).await, [[0, 0], [0, 0], [0, 0]]);
}
