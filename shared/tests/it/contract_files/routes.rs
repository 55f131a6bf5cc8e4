//! The route table, the template's HttpApi events and `openapi.yaml`: same routes, same error codes.

use std::collections::{BTreeMap, BTreeSet};

use koe::ROUTES;
use koe::platform::error::ErrorCode;
use koe_testkit::template::{load_yaml, repo_root};
use serde_norway::Value;

use super::{function_timeout, str_at};

/// (api, method, path, function, binary) for every HttpApi event in the template.
fn template_routes(template: &Value) -> BTreeSet<(String, String, String, String, String)> {
    let mut found = BTreeSet::new();
    let resources = template["Resources"].as_mapping().expect("Resources");
    for (id, resource) in resources {
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let id = id.as_str().unwrap().to_owned();
        let binary = str_at(resource, &["Metadata", "BuildProperties", "Binary"])
            .unwrap_or_else(|| panic!("{id} has no BuildProperties.Binary"))
            .to_owned();
        let Some(events) = resource["Properties"]["Events"].as_mapping() else {
            continue;
        };
        for event in events.values() {
            if event["Type"].as_str() != Some("HttpApi") {
                continue;
            }
            let props = &event["Properties"];
            found.insert((
                str_at(props, &["ApiId"]).expect("ApiId").to_owned(),
                str_at(props, &["Method"]).expect("Method").to_uppercase(),
                str_at(props, &["Path"]).expect("Path").to_owned(),
                id.clone(),
                binary.clone(),
            ));
        }
    }
    found
}

#[test]
fn template_declares_exactly_the_route_table() {
    let template = load_yaml("template.yaml");
    let declared = template_routes(&template);
    let table: BTreeSet<_> = ROUTES
        .iter()
        .map(|r| {
            (
                r.api.template_id().to_owned(),
                r.method.to_string(),
                r.path.to_owned(),
                r.function.to_owned(),
                r.binary.to_owned(),
            )
        })
        .collect();
    assert_eq!(
        declared, table,
        "template.yaml (left) vs route table (right)"
    );
}

#[test]
fn every_function_is_a_cargo_lambda_arm64_al2023_build_with_a_binary() {
    let template = load_yaml("template.yaml");
    let globals = &template["Globals"]["Function"];
    assert_eq!(globals["Runtime"].as_str(), Some("provided.al2023"));
    assert_eq!(globals["Architectures"][0].as_str(), Some("arm64"));
    for (id, resource) in template["Resources"].as_mapping().unwrap() {
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let id = id.as_str().unwrap();
        assert_eq!(
            resource["Metadata"]["BuildMethod"].as_str(),
            Some("rust-cargolambda"),
            "{id}"
        );
        let binary = str_at(resource, &["Metadata", "BuildProperties", "Binary"]).unwrap();
        let source = repo_root().join(format!("functions/src/bin/{binary}.rs"));
        assert!(source.exists(), "{id}: {} is missing", source.display());
    }
}

#[test]
fn openapi_documents_exactly_the_route_table() {
    let openapi = load_yaml("openapi.yaml");
    assert_eq!(openapi["openapi"].as_str().map(|v| &v[..3]), Some("3.1"));
    assert_eq!(openapi["info"]["version"].as_str(), Some("1.0.0"));
    let mut documented = BTreeSet::new();
    for (path, item) in openapi["paths"].as_mapping().expect("paths") {
        for (method, _) in item.as_mapping().unwrap() {
            let method = method.as_str().unwrap();
            if ["get", "post", "put", "delete", "patch"].contains(&method) {
                documented.insert((method.to_uppercase(), path.as_str().unwrap().to_owned()));
            }
        }
    }
    let table: BTreeSet<_> = ROUTES
        .iter()
        .map(|r| (r.method.to_string(), r.path.to_owned()))
        .collect();
    assert_eq!(
        documented, table,
        "openapi.yaml (left) vs route table (right)"
    );
}

/// `ErrorCode` is an open set (a plain string, so a generated client parses a code added later):
/// its description lists every code the code can answer, each with its one status, `- \`CODE\`
/// (status): ...`, and no other.
#[test]
fn openapi_lists_exactly_the_error_codes_the_code_can_answer() {
    let openapi = load_yaml("openapi.yaml");
    let schema = &openapi["components"]["schemas"]["ErrorCode"];
    assert_eq!(schema["type"].as_str(), Some("string"));
    assert!(
        schema.get("enum").is_none(),
        "ErrorCode is an open set: no enum, which would make a generated client refuse a new code"
    );
    let description = schema["description"]
        .as_str()
        .expect("components.schemas.ErrorCode.description");
    let mut documented = BTreeMap::new();
    for line in description.lines() {
        let Some(rest) = line.strip_prefix("- `") else {
            continue;
        };
        let (code, rest) = rest.split_once('`').expect("a code in backticks");
        let status = rest
            .strip_prefix(" (")
            .and_then(|r| r.get(..3))
            .and_then(|s| s.parse::<u16>().ok())
            .unwrap_or_else(|| panic!("`{code}` is followed by its status, ` (NNN)`"));
        assert!(
            documented.insert(code.to_owned(), status).is_none(),
            "{code} twice"
        );
    }
    let answered: BTreeMap<String, u16> = ErrorCode::ALL
        .iter()
        .map(|c| (c.as_str().to_owned(), c.status().as_u16()))
        .collect();
    assert_eq!(
        documented, answered,
        "ErrorCode's description (left) vs the code (right)"
    );
}

#[test]
fn every_route_has_a_fixture_for_its_method_and_path() {
    for route in ROUTES.iter() {
        let path = repo_root().join(format!("events/{}.json", route.binary));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let event: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            event["requestContext"]["http"]["method"],
            route.method.as_str()
        );
        assert_eq!(event["rawPath"], route.path);
        assert_eq!(
            event["routeKey"],
            format!("{} {}", route.method, route.path)
        );
    }
}

/// Each endpoint's `timeout` (the deadline the edge spends where no Lambda context gives one:
/// koe-local, the tests) is its function's `Timeout` in the template.
#[test]
fn every_routes_timeout_is_its_functions_timeout_in_the_template() {
    let template = load_yaml("template.yaml");
    let timeout = |id: &str| function_timeout(&template, id);
    struct Timeouts(Vec<(&'static str, u64)>);
    impl koe::app::Visit for Timeouts {
        fn visit<E: koe::app::ports::Served>(&mut self) {
            self.0.push((E::ROUTE.function, E::ROUTE.timeout.as_secs()));
        }
    }
    let mut found = Timeouts(Vec::new());
    koe::app::each(&mut found);
    assert!(found.0.len() >= ROUTES.len(), "{:?}", found.0);
    for (function, secs) in found.0 {
        assert_eq!(
            secs,
            timeout(function),
            "{function}: route timeout vs template"
        );
    }
}
