//! Time budgets add up: every function's worst case (`koe::budgets`, from the code's own
//! timeouts and retries) fits its timeout in `template.yaml` with a margin, and, behind API
//! Gateway, its integration timeout; code and template agree on the provider budget's bounds.
//! Raising a timeout in the code past what its function allows fails here.

use std::time::Duration;

use koe::budgets::{Budget, GATEWAY_TIMEOUT, MARGIN, at_the_limits, worst_cases};
use koe::config::{DEFAULT_PROVIDER_TIMEOUT_MS, MAX_PROVIDER_TIMEOUT_MS};
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
        if budget.total() + MARGIN > limit {
            overruns.push(format!(
                "{}: worst case {:?} + margin {MARGIN:?} > {limit:?} ({:?})",
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
    // Every function of the template has its budget.
    let mut functions: Vec<&str> = budgets.iter().map(|b| b.function).collect();
    functions.sort_unstable();
    functions.dedup();
    let mut declared = resources_of_type(&template, "AWS::Serverless::Function");
    declared.sort_unstable();
    assert_eq!(functions, declared);
}

#[test]
fn the_check_catches_a_provider_budget_past_the_template_bound() {
    let template = load_yaml("template.yaml");
    let too_long = worst_cases(Duration::from_millis(MAX_PROVIDER_TIMEOUT_MS + 1000));
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
    let vars = koe::config::Vars::from_pairs(&[("PROVIDER_TIMEOUT_MS", "25001")]);
    assert_eq!(
        koe::config::OpenAiConfig::from_vars(&vars).unwrap_err().var,
        "PROVIDER_TIMEOUT_MS"
    );
}

/// A forced Secrets Manager read (`koe::secrets::READ_TIMEOUT`) comes on top of the worst case of every function behind the agent API's
/// key (a forced read runs before the handler): together they fit its timeout in
/// `template.yaml`, and API Gateway's, with the margin `koe::budgets` keeps.
#[test]
fn a_forced_read_fits_every_api_key_functions_time_budget() {
    let template = load_yaml("template.yaml");
    let budgets = at_the_limits();
    let keyed = koe::ROUTES
        .iter()
        .filter(|r| r.auth == koe::routes::Auth::ApiKey);
    let mut checked = 0;
    for route in keyed {
        let budget = budgets
            .iter()
            .find(|b| b.function == route.function)
            .unwrap_or_else(|| panic!("{} has a budget", route.function));
        let secs = template["Resources"][route.function]["Properties"]["Timeout"]
            .as_u64()
            .or_else(|| template["Globals"]["Function"]["Timeout"].as_u64())
            .unwrap_or_else(|| panic!("{} has a timeout", route.function));
        let limit = Duration::from_secs(secs).min(GATEWAY_TIMEOUT);
        let worst = budget.total() + koe::secrets::READ_TIMEOUT + MARGIN;
        assert!(
            worst <= limit,
            "{}: {worst:?} with a forced secret read > {limit:?}",
            route.function
        );
        checked += 1;
    }
    assert!(checked >= 5, "every agent API route is checked");
}
