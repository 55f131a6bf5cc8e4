//! Each template function: its binary, route, fixture, streaming and timeout.

use std::collections::BTreeSet;

use koe::ROUTES;
use koe::app::ports::Served;
use koe::app::{STREAMED, StreamedFunction, Visit};
use koe_testkit::template::{load_yaml, repo_root};
use serde_norway::Value;

use super::{function_timeout, str_at, template_functions};

/// Each function of `template.yaml` is deployable as built: a binary in `functions/src/bin` (and
/// no binary without a function), which runs its own constructor in `koe::app::wiring`
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
                source.contains("koe::app::lambda::dispatch::run()"),
                "{binary}.rs"
            );
        } else {
            let endpoint = &endpoint_types()[binary.as_str()];
            let run = format!("::api::{endpoint}>().await");
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

/// A streamed function (`koe::app::STREAMED`): its binary runs its entrypoint, it has a
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

/// Each endpoint's binary name and the name of its type in its feature's `api`.
fn endpoint_types() -> std::collections::BTreeMap<&'static str, &'static str> {
    struct Names(std::collections::BTreeMap<&'static str, &'static str>);
    impl Visit for Names {
        fn visit<E: Served>(&mut self) {
            let name = std::any::type_name::<E>().rsplit("::").next().unwrap();
            self.0.insert(E::ROUTE.binary, name);
        }
    }
    let mut names = Names(Default::default());
    koe::app::each(&mut names);
    names.0
}

/// Timeouts fit the work: chat and agent stay under API Gateway's 29 s with the largest provider
/// budget the template allows plus an error notification (at most 2 s); the dispatcher outlasts
/// its run window.
#[test]
fn function_timeouts_fit_their_work() {
    let template = load_yaml("template.yaml");
    let timeout = |id: &str| function_timeout(&template, id);
    let max_budget_ms = template["Parameters"]["ProviderTimeoutMs"]["MaxValue"]
        .as_u64()
        .unwrap();
    for id in ["ChatFunction", "AgentFunction"] {
        assert!(timeout(id) < 29, "{id}");
        assert!(max_budget_ms + 2_000 <= timeout(id) * 1000, "{id}");
    }
    let window = koe::platform::config::DEFAULT_DISPATCH_WINDOW.as_secs();
    assert!(timeout("DispatchFunction") > window + 10);
    assert!(timeout("DispatchPartFunction") > window + 10);
    // Nothing needs more than about two and a half minutes (the dispatch runs: a 70 s window,
    // then the last call's push, its answer and its outcome, or a last confirmation wait and its
    // `unconfirmed`; shared/src/app/budgets.rs has the exact figures, 142 s at most).
    for (id, _) in template_functions(&template) {
        assert!(timeout(&id) <= 145, "{id}");
    }
}
