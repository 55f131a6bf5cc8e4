//! docs/scale.md's capacity settings by users hold the template's reservations: each
//! function's reserved concurrency, as `template.yaml` deploys it by default, is the table's
//! "new account" figure for its parameter.

use koe_testkit::template::{load_yaml, repo_root};
use serde_norway::Value;

use super::template_settings::resolve;

/// The parameter a reservation takes its figure from (`!Ref P`, or `!If [c, !Ref P, ..]`);
/// `None` for a fixed figure.
fn parameter(value: &Value) -> Option<String> {
    match value {
        Value::Tagged(t) if t.tag == "Ref" => t.value.as_str().map(str::to_owned),
        Value::Tagged(t) if t.tag == "If" => parameter(&t.value.as_sequence()?[1]),
        _ => None,
    }
}

#[test]
fn each_functions_reserved_concurrency_is_the_capacity_tables_new_account_figure() {
    let template = load_yaml("template.yaml");
    let scale = std::fs::read_to_string(repo_root().join("docs/scale.md")).unwrap();
    let mut checked = 0;
    for (id, resource) in template["Resources"].as_mapping().unwrap() {
        let reserved = &resource["Properties"]["ReservedConcurrentExecutions"];
        if reserved.is_null() {
            continue;
        }
        let id = id.as_str().unwrap();
        let Some(parameter) = parameter(reserved) else {
            continue;
        };
        let deployed = resolve(&template, reserved);
        let said = column(&scale, &parameter, "new account").unwrap_or_else(|| {
            panic!("docs/scale.md's capacity table has no `{parameter}` row ({id})")
        });
        assert_eq!(
            said, deployed,
            "{id}: docs/scale.md says {parameter} is {said} on a new account, template.yaml reserves {deployed}"
        );
        checked += 1;
    }
    assert!(checked >= 5, "{checked} reservations checked");
}

/// The million's settings, `samconfig.toml`'s commented `prod` line, are the template's
/// parameters within their bounds, and its reservations are the table's 1,000,000 column.
#[test]
fn the_commented_prod_line_for_a_million_users_deploys_the_tables_figures() {
    let template = load_yaml("template.yaml");
    let scale = std::fs::read_to_string(repo_root().join("docs/scale.md")).unwrap();
    let samconfig = std::fs::read_to_string(repo_root().join("samconfig.toml")).unwrap();
    let line = samconfig
        .lines()
        .find_map(|l| l.strip_prefix("# parameter_overrides = "))
        .expect("samconfig.toml has a commented parameter_overrides line");
    let mut reservations = 0;
    for pair in line.trim_matches('"').split_whitespace() {
        let (name, value) = pair.split_once('=').unwrap();
        let declared = &template["Parameters"][name];
        assert!(!declared.is_null(), "{name} is not a parameter");
        if let Ok(n) = value.parse::<f64>() {
            let bound = |key: &str| declared[key].as_f64();
            assert!(bound("MinValue").is_none_or(|min| n >= min), "{pair}");
            assert!(bound("MaxValue").is_none_or(|max| n <= max), "{pair}");
        }
        if name.ends_with("ReservedConcurrency") {
            let said = column(&scale, name, "1,000,000").unwrap();
            assert_eq!(said, value, "{name}: the table's million");
            reservations += 1;
        }
    }
    assert_eq!(reservations, 2, "chat's and agent's reservations");
}

/// The figure of `parameter` in the table's column `header`.
fn column(scale: &str, parameter: &str, header: &str) -> Option<String> {
    let section = scale.split("## Capacity settings by users").nth(1)?;
    let mut rows = section.lines().filter(|l| l.starts_with('|'));
    let headers: Vec<&str> = rows.next()?.split('|').map(str::trim).collect();
    let at_column = headers.iter().position(|c| *c == header)?;
    for row in rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let names: Vec<&str> = cells[1].split('`').skip(1).step_by(2).collect();
        if let Some(at) = names.iter().position(|n| *n == parameter) {
            let figures: Vec<&str> = cells[at_column].split(", ").collect();
            return figures.get(at).map(|f| f.replace(',', ""));
        }
    }
    None
}
