//! The route table, `template.yaml` and `openapi.yaml` describe the same API: same functions,
//! binaries, methods and paths, same error codes. Change one without the others and this fails.

use std::collections::BTreeSet;

use koe::handlers::error::ErrorCode;
use koe::routes::{Endpoint, STREAMED, StreamedFunction, Visit};
use koe::{Api, ROUTES};
use koe_testkit::template::{load_yaml, repo_root};
use serde_norway::Value;

/// The value under a CloudFormation short-form tag (`!Ref X` → `X`), or the value itself.
fn untag(value: &Value) -> &Value {
    match value {
        Value::Tagged(tagged) => &tagged.value,
        other => other,
    }
}

fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut v = value;
    for key in path {
        v = untag(v).get(*key)?;
    }
    untag(v).as_str()
}

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

#[test]
fn openapi_lists_exactly_the_error_codes_the_code_can_answer() {
    let openapi = load_yaml("openapi.yaml");
    let documented: BTreeSet<&str> = openapi["components"]["schemas"]["ErrorCode"]["enum"]
        .as_sequence()
        .expect("components.schemas.ErrorCode.enum")
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let answered: BTreeSet<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(documented, answered);
}

#[test]
fn every_route_has_a_fixture_for_its_method_and_path() {
    for route in ROUTES {
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

/// The function ids and binaries of every `AWS::Serverless::Function` in the template.
fn template_functions(template: &Value) -> Vec<(String, String)> {
    template["Resources"]
        .as_mapping()
        .expect("Resources")
        .iter()
        .filter(|(_, r)| r["Type"].as_str() == Some("AWS::Serverless::Function"))
        .map(|(id, r)| {
            let id = id.as_str().unwrap().to_owned();
            let binary = str_at(r, &["Metadata", "BuildProperties", "Binary"])
                .unwrap_or_else(|| panic!("{id} has no BuildProperties.Binary"))
                .to_owned();
            (id, binary)
        })
        .collect()
}

/// Each function of `template.yaml` is deployable as built: a binary in `functions/src/bin` (and
/// no binary without a function), which runs its own constructor in `koe::wiring`
/// (`lambda_fixtures.rs` runs every fixture through those constructors and checks their
/// endpoints), at
/// least one route in the route table (the dispatcher also its schedule, with its own fixture),
/// and a fixture in `events/`.
#[test]
fn every_template_function_has_a_binary_a_route_and_a_fixture() {
    let template = load_yaml("template.yaml");
    let functions = template_functions(&template);

    let binaries: BTreeSet<String> = std::fs::read_dir(repo_root().join("functions/src/bin"))
        .unwrap()
        .map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".rs").expect("only .rs files").to_owned()
        })
        .collect();
    let deployed: BTreeSet<String> = functions.iter().map(|(_, b)| b.clone()).collect();
    assert_eq!(
        binaries, deployed,
        "functions/src/bin (left) vs template.yaml (right)"
    );

    for (id, binary) in &functions {
        if let Some(streamed) = STREAMED.iter().find(|s| s.route.function == id) {
            check_streamed_function(&template, streamed, binary);
            continue;
        }
        let routes: Vec<_> = ROUTES.iter().filter(|r| r.function == id).collect();
        if id == "DispatchFunction" || id == "DispatchPartFunction" {
            // The run function and the parts' function: the dispatch binary without a route
            // (its route has a function of its own, DispatchRouteFunction, so callers cannot
            // take the runs' concurrency).
            assert!(routes.is_empty(), "{id}");
            assert_eq!(binary, "dispatch");
            continue;
        }
        assert!(!routes.is_empty(), "{id}: no route in the route table");
        for route in &routes {
            assert_eq!(route.binary, binary, "{id}");
        }
        let source =
            std::fs::read_to_string(repo_root().join(format!("functions/src/bin/{binary}.rs")))
                .unwrap();
        if binary == "dispatch" {
            assert!(
                source.contains("koe::lambda::dispatch::run()"),
                "{binary}.rs"
            );
        } else {
            let endpoint = &endpoint_types()[binary.as_str()];
            let run = format!("koe::lambda::http::run::<koe::routes::{endpoint}>()");
            assert!(
                source.contains(&run),
                "functions/src/bin/{binary}.rs must call {run}"
            );
        }
        assert!(
            repo_root().join(format!("events/{binary}.json")).exists(),
            "{id}: events/{binary}.json is missing"
        );
    }

    // The dispatcher's every-minute schedule (6-field EventBridge cron) and its fixture, on the
    // run function, which reserves its concurrency; the route's function reserves none of it.
    let run = &template["Resources"]["DispatchFunction"]["Properties"];
    assert!(!run["ReservedConcurrentExecutions"].is_null());
    assert!(template["Resources"]["DispatchRouteFunction"]["Properties"]["ReservedConcurrentExecutions"].is_null());
    let events = &run["Events"];
    let schedules: Vec<&str> = events
        .as_mapping()
        .unwrap()
        .values()
        .filter(|e| e["Type"].as_str() == Some("Schedule"))
        .map(|e| str_at(e, &["Properties", "Schedule"]).unwrap())
        .collect();
    assert_eq!(schedules, ["cron(* * * * ? *)"]);
    let text = std::fs::read_to_string(repo_root().join("events/dispatch-schedule.json")).unwrap();
    let event: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(event["source"], "aws.events");
    assert_eq!(event["detail-type"], "Scheduled Event");

    // The bus's rules deliver what the code publishes: requested runs and wakes to the run
    // function, parts to the part function; the fixtures carry the same source and type.
    use koe::dispatch::trigger::{DETAIL_TYPE, PART_DETAIL_TYPE, SOURCE, WAKE_DETAIL_TYPE};
    let rule_of = |function: &str| -> (Vec<String>, Vec<String>) {
        let events = &template["Resources"][function]["Properties"]["Events"];
        let rule = events
            .as_mapping()
            .unwrap()
            .values()
            .find(|e| e["Type"].as_str() == Some("EventBridgeRule"))
            .unwrap_or_else(|| panic!("{function} has no EventBridge rule"));
        let list = |key: &str| -> Vec<String> {
            let values = rule["Properties"]["Pattern"][key].as_sequence().unwrap();
            values
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect()
        };
        (list("source"), list("detail-type"))
    };
    assert_eq!(
        rule_of("DispatchFunction"),
        (
            vec![SOURCE.into()],
            vec![DETAIL_TYPE.into(), WAKE_DETAIL_TYPE.into()]
        )
    );
    assert_eq!(
        rule_of("DispatchPartFunction"),
        (vec![SOURCE.into()], vec![PART_DETAIL_TYPE.into()])
    );
    for (fixture, detail_type) in [
        ("dispatch-requested", DETAIL_TYPE),
        ("dispatch-wake", WAKE_DETAIL_TYPE),
        ("dispatch-part", PART_DETAIL_TYPE),
    ] {
        let event = koe_testkit::fixtures::committed(fixture);
        assert_eq!(
            (event["source"].as_str(), event["detail-type"].as_str()),
            (Some(SOURCE), Some(detail_type)),
            "events/{fixture}.json"
        );
    }
}

/// A streamed function (`koe::routes::STREAMED`): its binary runs its entrypoint, it has a
/// function URL with response streaming and no API route, and a fixture (the URL's payload v2
/// event for the route, asking for events); every streamed function is in the template.
fn check_streamed_function(template: &Value, streamed: &StreamedFunction, binary: &str) {
    let id = streamed.route.function;
    assert_eq!(streamed.route.binary, binary, "{id}");
    let source =
        std::fs::read_to_string(repo_root().join(format!("functions/src/bin/{binary}.rs")))
            .unwrap();
    assert!(
        source.contains(streamed.entrypoint),
        "{binary}.rs must call {}",
        streamed.entrypoint
    );
    let properties = &template["Resources"][id]["Properties"];
    assert_eq!(
        str_at(properties, &["FunctionUrlConfig", "InvokeMode"]),
        Some("RESPONSE_STREAM"),
        "{id}"
    );
    assert!(
        properties.get("Events").is_none(),
        "{id}: served by its URL only"
    );
    let text = std::fs::read_to_string(repo_root().join(format!("events/{binary}.json")))
        .unwrap_or_else(|e| panic!("events/{binary}.json: {e}"));
    let event: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(event["rawPath"], streamed.route.path);
    assert_eq!(
        event["requestContext"]["http"]["method"],
        streamed.route.method.as_str()
    );
    assert_eq!(event["routeKey"], "$default", "a function URL's event");
    assert_eq!(event["headers"]["accept"], "text/event-stream");
}

#[test]
fn every_streamed_function_is_in_the_template() {
    let template = load_yaml("template.yaml");
    let functions = template_functions(&template);
    for streamed in STREAMED {
        assert!(
            functions.contains(&(
                streamed.route.function.to_owned(),
                streamed.route.binary.to_owned()
            )),
            "{streamed:?}"
        );
    }
}

/// Each endpoint's binary name and the name of its type in `koe::routes`.
fn endpoint_types() -> std::collections::BTreeMap<&'static str, &'static str> {
    struct Names(std::collections::BTreeMap<&'static str, &'static str>);
    impl Visit for Names {
        fn visit<E: Endpoint>(&mut self) {
            let name = std::any::type_name::<E>().rsplit("::").next().unwrap();
            self.0.insert(E::ROUTE.binary, name);
        }
    }
    let mut names = Names(Default::default());
    koe::routes::each(&mut names);
    names.0
}

/// Timeouts fit the work: chat and agent stay under API Gateway's 29 s with the largest provider
/// budget the template allows plus an error notification (at most 2 s); the dispatcher outlasts
/// its run window.
#[test]
fn function_timeouts_fit_their_work() {
    let template = load_yaml("template.yaml");
    let timeout = |id: &str| {
        template["Resources"][id]["Properties"]["Timeout"]
            .as_u64()
            .unwrap_or_else(|| template["Globals"]["Function"]["Timeout"].as_u64().unwrap())
    };
    let max_budget_ms = template["Parameters"]["ProviderTimeoutMs"]["MaxValue"]
        .as_u64()
        .unwrap();
    for id in ["ChatFunction", "AgentFunction"] {
        assert!(timeout(id) < 29, "{id}");
        assert!(max_budget_ms + 2_000 <= timeout(id) * 1000, "{id}");
    }
    let window = koe::config::DEFAULT_DISPATCH_WINDOW.as_secs();
    assert!(timeout("DispatchFunction") > window + 10);
    assert!(timeout("DispatchPartFunction") > window + 10);
    // Nothing needs more than two minutes (the dispatch runs: a 70 s window, then the last
    // call's outcome retried for 10 s; shared/src/budgets.rs has the exact figures).
    for (id, _) in template_functions(&template) {
        assert!(timeout(&id) <= 120, "{id}");
    }
}

/// scripts/test.sh runs the HTTP suites a second time through the gateway front
/// (`KOE_TEST_FRONT=lambda`) by naming their modules: every module that starts the app through
/// the harness must be named there (dispatch_runs by its one such test, gateway_front always
/// runs through the gateway; this file only names the calls), or a new suite would silently skip production's path.
#[test]
fn test_sh_runs_every_http_suite_through_the_gateway_front() {
    let root = repo_root();
    let script = std::fs::read_to_string(root.join("scripts/test.sh")).unwrap();
    let line_start = script
        .find("KOE_TEST_FRONT=lambda cargo test")
        .expect("test.sh has the gateway-front pass");
    let command: String = script[line_start..]
        .lines()
        .take_while(|l| !l.contains("tee -a"))
        .collect::<Vec<_>>()
        .join(" ");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root.join("shared/tests/it")).unwrap() {
        let path = entry.unwrap().path();
        let module = path.file_stem().unwrap().to_str().unwrap().to_owned();
        // A module folder (`docs_facts/`): its files together.
        let source = if path.is_dir() {
            std::fs::read_dir(&path)
                .unwrap()
                .map(|f| std::fs::read_to_string(f.unwrap().path()).unwrap_or_default())
                .collect::<String>()
        } else {
            std::fs::read_to_string(&path).unwrap()
        };
        let starts_app = ["spawn_app(", "spawn_app_with(", "spawn_app_on("]
            .iter()
            .any(|call| source.contains(call));
        if !starts_app
            || ["gateway_front", "dispatch_runs", "contract_files"].contains(&module.as_str())
        {
            continue;
        }
        if !command.contains(&format!(" {module}::")) {
            missing.push(module);
        }
    }
    assert!(
        missing.is_empty(),
        "modules using spawn_app* not in test.sh's gateway-front pass: {missing:?}"
    );
    assert!(
        command.contains("a_cancel_racing_the_claim"),
        "dispatch_runs' one harness test is in the pass"
    );
}

/// `events/env.json` (for `sam local invoke --env-vars`) has a section for every function of the
/// template and nothing else but `Parameters`, and a function's section names only variables the
/// template declares for it (its own or `Globals`): SAM applies no other (docs/local.md,
/// "Fixtures and local invocation"). Secrets are named by ARN, as deployed (the fixture test's stand-in Secrets
/// Manager holds them).
#[test]
fn env_json_covers_every_function_with_variables_sam_applies() {
    let template = load_yaml("template.yaml");
    let text = std::fs::read_to_string(repo_root().join("events/env.json")).unwrap();
    let env: serde_json::Value = serde_json::from_str(&text).expect("events/env.json is JSON");
    let env = env.as_object().expect("an object");
    let declared_in = |vars: &Value| -> BTreeSet<String> {
        untag(vars)
            .as_mapping()
            .map(|m| m.keys().map(|k| k.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    };
    let globals = declared_in(&template["Globals"]["Function"]["Environment"]["Variables"]);
    let functions = template_functions(&template);
    let mut sections: BTreeSet<&str> = env.keys().map(String::as_str).collect();
    assert!(sections.remove("Parameters"), "env.json has Parameters");
    let ids: BTreeSet<&str> = functions.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(sections, ids, "one section per template function");
    for (id, _) in &functions {
        let resource = &template["Resources"][id.as_str()];
        let own = declared_in(&resource["Properties"]["Environment"]["Variables"]);
        let section = env[id.as_str()].as_object().unwrap();
        for name in section.keys() {
            assert!(
                own.contains(name) || globals.contains(name),
                "env.json sets {name} for {id}, which template.yaml does not declare for it"
            );
        }
        for (var, _) in koe::secrets::SECRET_VARS {
            assert!(
                !section.contains_key(var),
                "env.json gives {id} the secret {var} as a value: name its ARN instead"
            );
        }
    }
}

/// The lowest gateway request rate (per second) either API may be throttled to: far above launch
/// traffic, so a throttle is only a stop against floods. The chat API sets none at all.
const THROTTLE_RATE_FLOOR: f64 = 100.0;

/// A number in the template, or the `MinValue` (the lowest a deploy can set) of the parameter
/// it refers to, whose `Default` must also be at least that.
fn lowest_number(template: &Value, value: &Value) -> f64 {
    if let Value::Tagged(tagged) = value {
        assert_eq!(tagged.tag.to_string(), "!Ref", "{value:?}");
        let name = tagged.value.as_str().expect("!Ref name");
        let parameter = &template["Parameters"][name];
        let min = parameter["MinValue"]
            .as_f64()
            .unwrap_or_else(|| panic!("parameter {name} has no MinValue"));
        let default = parameter["Default"].as_f64().expect("Default");
        assert!(default >= min, "{name}: Default below MinValue");
        return min;
    }
    value
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {value:?}"))
}

/// Chat is limited by the chat function's reserved concurrency (the interface: "automatic,
/// through the runtime's concurrency limit; no explicit per-client rate"), so the chat API
/// sets no gateway throttle; the agent API's throttle, on any route or stage, is never below
/// the floor.
#[test]
fn gateway_throttles_stay_off_chat_and_above_the_floor_on_agent() {
    let template = load_yaml("template.yaml");
    let resources = template["Resources"].as_mapping().unwrap();
    let mut apis = 0;
    for (id, resource) in resources {
        let id = id.as_str().unwrap();
        let kind = resource["Type"].as_str().unwrap_or_default();
        if kind != "AWS::Serverless::HttpApi" && !kind.starts_with("AWS::ApiGatewayV2::") {
            continue;
        }
        apis += 1;
        let props = &resource["Properties"];
        let mut settings: Vec<&Value> = vec![&props["DefaultRouteSettings"]];
        if let Some(routes) = props["RouteSettings"].as_mapping() {
            settings.extend(routes.values());
        }
        if let Some(stage) = props["StageSettings"].as_mapping() {
            settings.push(&stage["DefaultRouteSettings"]);
            if let Some(routes) = stage.get("RouteSettings").and_then(Value::as_mapping) {
                settings.extend(routes.values());
            }
        }
        for s in settings {
            for key in ["ThrottlingRateLimit", "ThrottlingBurstLimit"] {
                let Some(value) = s.get(key) else { continue };
                assert_ne!(
                    id,
                    Api::Chat.template_id(),
                    "the chat API sets no gateway throttle ({key})"
                );
                let lowest = lowest_number(&template, value);
                assert!(
                    lowest >= THROTTLE_RATE_FLOOR,
                    "{id} {key} can be {lowest}, below the floor of {THROTTLE_RATE_FLOOR}/s"
                );
            }
        }
    }
    assert!(apis >= 2, "both HTTP APIs were looked at");

    let chat = &template["Resources"]["ChatFunction"]["Properties"];
    let reserved = &chat["ReservedConcurrentExecutions"];
    let Value::Tagged(tagged) = reserved else {
        panic!("ChatFunction's ReservedConcurrentExecutions is a !Ref to a parameter: {reserved:?}")
    };
    let name = tagged.value.as_str().unwrap();
    let parameter = &template["Parameters"][name];
    assert_eq!(parameter["Type"].as_str(), Some("Number"), "{name}");
    let default = parameter["Default"].as_u64().expect("a default");
    assert!(
        (1..=900).contains(&default),
        "{name} default {default}: at least 1, and at most 900 so 100 stay unreserved"
    );
}
