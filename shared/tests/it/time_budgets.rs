//! Time budgets add up where no deadline cuts: a dispatch run, the streamed chat, and the
//! provider's budget of chat and agent before their deadline (`koe::app::budgets`, from the code's
//! own timeouts and retries) fit their timeouts in `template.yaml`, and, behind API Gateway,
//! its integration timeout; every other function is an endpoint that spends its deadline
//! (`deadlines.rs` measures them). Code and template agree on the provider budget's bounds.

use std::time::Duration;

use koe::app::budgets::{Budget, GATEWAY_TIMEOUT, at_the_limits, worst_cases};
use koe::platform::config::{DEFAULT_PROVIDER_TIMEOUT_MS, MAX_PROVIDER_TIMEOUT_MS};
use koe_testkit::template::{load_yaml, resources_of_type};

fn timeout(template: &serde_norway::Value, id: &str) -> Duration {
    let secs = template["Resources"][id]["Properties"]["Timeout"]
        .as_u64()
        .or_else(|| template["Globals"]["Function"]["Timeout"].as_u64())
        .unwrap_or_else(|| panic!("{id} has a timeout"));
    Duration::from_secs(secs)
}

/// The budgets that do not fit: each with its worst case and its limit.
fn overruns(template: &serde_norway::Value, budgets: &[Budget]) -> Vec<String> {
    let mut overruns = Vec::new();
    for budget in budgets {
        let mut limit = timeout(template, budget.function);
        if budget.behind_gateway {
            limit = limit.min(GATEWAY_TIMEOUT);
        }
        if budget.total() > limit {
            overruns.push(format!(
                "{}: worst case {:?} > {limit:?} ({:?})",
                budget.function,
                budget.total(),
                budget.parts
            ));
        }
    }
    overruns
}

#[test]
fn every_functions_worst_case_fits_its_timeout_with_margin() {
    let template = load_yaml("template.yaml");
    let budgets = at_the_limits();
    let overruns = overruns(&template, &budgets);
    assert!(overruns.is_empty(), "{}", overruns.join("\n"));
    // Every function of the template has its budget, or is an endpoint behind the edge, which
    // spends its invocation's deadline.
    let mut functions: Vec<&str> = budgets.iter().map(|b| b.function).collect();
    functions.extend(koe::ROUTES.iter().map(|r| r.function));
    functions.sort_unstable();
    functions.dedup();
    let mut declared = resources_of_type(&template, "AWS::Serverless::Function");
    declared.sort_unstable();
    assert_eq!(functions, declared);
}

#[test]
fn the_check_catches_a_provider_budget_past_the_template_bound() {
    let template = load_yaml("template.yaml");
    let too_long = worst_cases(Duration::from_millis(MAX_PROVIDER_TIMEOUT_MS + 2000));
    let overruns = overruns(&template, &too_long);
    assert!(
        overruns.iter().any(|o| o.starts_with("ChatFunction")),
        "{overruns:?}"
    );
}

#[test]
fn code_and_template_agree_on_the_provider_budget() {
    let template = load_yaml("template.yaml");
    let parameter = &template["Parameters"]["ProviderTimeoutMs"];
    assert_eq!(
        parameter["MaxValue"].as_u64(),
        Some(MAX_PROVIDER_TIMEOUT_MS)
    );
    assert_eq!(
        parameter["Default"].as_u64(),
        Some(DEFAULT_PROVIDER_TIMEOUT_MS)
    );
    // The code refuses what the template refuses.
    let vars = koe::platform::config::Vars::from_pairs(&[("PROVIDER_TIMEOUT_MS", "25001")]);
    assert_eq!(
        koe::platform::config::OpenAiConfig::from_vars(&vars)
            .unwrap_err()
            .var,
        "PROVIDER_TIMEOUT_MS"
    );
}
