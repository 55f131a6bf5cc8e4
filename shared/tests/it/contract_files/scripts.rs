//! scripts/test.sh's gateway-front pass and client generators, and `events/env.json`, agree with
//! the suites, openapi.yaml's checks and the template.

use std::collections::BTreeSet;

use koe_testkit::template::{load_yaml, repo_root};

use super::template_functions;

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
        // apns_outside: its subject is koe-local's in-process dispatcher and its pushes (the
        // HTTP requests only set it up), which only the local front runs; local_model: koe-local's
        // built-in model, and each of its tests names its front.
        if !starts_app
            || [
                "gateway_front",
                "dispatch_runs",
                "contract_files",
                "apns_outside",
                "local_model",
            ]
            .contains(&module.as_str())
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

/// scripts/test.sh runs scripts/client-generators.sh (openapi-python-client and openapi-typescript
/// with `tsc --strict`, each pinned) as one of its steps, after the OpenAPI validation and before
/// the tests, and installs both with the other tools in the background: a spec that a generator
/// types only in part stops the run, not only a run of the script by hand.
#[test]
fn test_sh_runs_the_client_generators_on_openapi() {
    let root = repo_root();
    let script = std::fs::read_to_string(root.join("scripts/test.sh")).unwrap();
    let line = |needle: &str| {
        script
            .lines()
            .position(|l| l.trim() == needle)
            .unwrap_or_else(|| panic!("test.sh has the line `{needle}`"))
    };
    let validated = line("\"$VENV/bin/openapi-spec-validator\" openapi.yaml");
    let generated = line("scripts/client-generators.sh");
    let tests = line("step \"cargo test\"");
    assert!(
        validated < generated && generated < tests,
        "client generators run after openapi-spec-validator ({validated}) and before the tests \
         ({tests}), not at line {generated}"
    );
    let install = script
        .lines()
        .skip_while(|l| !l.contains("KOE_TOOLS_INSTALL_ONLY=1"))
        .take(3)
        .collect::<String>();
    assert!(
        install.contains("scripts/client-generators.sh &"),
        "the background install runs scripts/client-generators.sh: {install}"
    );
    let generators = std::fs::read_to_string(root.join("scripts/client-generators.sh")).unwrap();
    for pin in [
        "PYTHON_CLIENT_VERSION",
        "OPENAPI_TYPESCRIPT_VERSION",
        "TYPESCRIPT_VERSION",
    ] {
        let pinned = generators
            .lines()
            .find_map(|l| l.strip_prefix(&format!("readonly {pin}=\"")))
            .unwrap_or_else(|| panic!("client-generators.sh pins {pin}"));
        assert!(
            pinned.trim_end_matches('"').split('.').count() == 3,
            "{pin} is an exact version: {pinned}"
        );
    }
}

/// `events/env.json` (for `sam local invoke --env-vars`): `Parameters` serve every function (SAM
/// applies to a function only the variables the template declares for it, its own or
/// `Globals`': docs/local.md, "Fixtures and local invocation"), each a variable some function
/// declares or the container's own (`koe_testkit::local_env::RUNTIME_VARIABLES`); a function's
/// section holds only what differs for it, of its declared variables. Secrets are named by ARN,
/// as deployed (the fixture test's stand-in Secrets Manager holds them).
#[test]
fn env_json_covers_every_function_with_variables_sam_applies() {
    let template = load_yaml("template.yaml");
    let text = std::fs::read_to_string(repo_root().join("events/env.json")).unwrap();
    let env: serde_json::Value = serde_json::from_str(&text).expect("events/env.json is JSON");
    let env = env.as_object().expect("an object");
    let parameters = env["Parameters"]
        .as_object()
        .expect("env.json has Parameters");
    let functions = template_functions(&template);
    let mut declared_somewhere = BTreeSet::new();
    for (id, _) in &functions {
        let declared = koe_testkit::local_env::declared_variables(id);
        declared_somewhere.extend(declared.iter().cloned());
        let Some(section) = env.get(id.as_str()) else {
            continue;
        };
        for (name, value) in section.as_object().unwrap() {
            assert!(
                declared.contains(name),
                "env.json sets {name} for {id}, which template.yaml does not declare for it"
            );
            assert_ne!(
                parameters.get(name),
                Some(value),
                "env.json's {id} repeats Parameters' {name}"
            );
        }
    }
    for section in env.keys().filter(|k| *k != "Parameters") {
        assert!(
            functions.iter().any(|(id, _)| id == section),
            "env.json has a section {section}, not a function of the template"
        );
    }
    for name in parameters.keys() {
        assert!(
            declared_somewhere.contains(name)
                || koe_testkit::local_env::RUNTIME_VARIABLES.contains(&name.as_str()),
            "env.json's Parameters set {name}, which no function declares"
        );
    }
    for (var, _) in koe::platform::secrets::SECRET_VARS {
        for (id, section) in env {
            assert!(
                !section.as_object().unwrap().contains_key(var),
                "env.json gives {id} the secret {var} as a value: name its ARN instead"
            );
        }
    }
}
