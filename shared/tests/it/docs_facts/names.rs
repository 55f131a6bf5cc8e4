//! Error codes, variables and constants named in the docs exist; configuration.md's defaults
//! are the code's.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

use koe::platform::config::{ApnsPoolConfig, AwsConfig, Config, LogConfig, PushSenderChoice, Vars};
use koe::platform::error::ErrorCode;
use koe_testkit::template::repo_root;

use super::extract::{
    code_spans, constants, default_rows, literal_default, string_literals, upper_snake,
    without_tests,
};
use super::{markdown, read, report, rust_files};

/// Outside names the docs may use in backticks, none of them ours to check.
const ALLOWED: &[&str] = &[
    // HTTP methods.
    "GET",
    "POST",
    "PUT",
    "DELETE",
    // DynamoDB's update-expression actions and index projections.
    "ADD",
    "SET",
    "REMOVE",
    "INCLUDE",
    "KEYS_ONLY",
    "ALL",
    // HTTP/2 and TCP names (APNs' connections).
    "REFUSED_STREAM",
    "SETTINGS_MAX_CONCURRENT_STREAMS",
    "TCP_NODELAY",
    // `sam deploy --capabilities`.
    "CAPABILITY_IAM",
    // A log level.
    "ERROR",
    // Read by the AWS CLI and SDK themselves, never by koe.
    "AWS_PROFILE",
    // Cargo's own override of a profile setting (docs/benchmarks.md's build comparison).
    "CARGO_PROFILE_RELEASE_OPT_LEVEL",
];

/// The error codes of the API.
fn error_codes() -> BTreeSet<String> {
    ErrorCode::ALL
        .iter()
        .map(|c| c.as_str().to_owned())
        .collect()
}

/// The files that read the configuration: each section, koe-local's, the wiring's.
fn config_sources() -> Vec<String> {
    let mut files = rust_files("shared/src/platform/config");
    files.extend(rust_files("shared/src/app/wiring"));
    files.push(repo_root().join("koe-local/src/lib.rs"));
    files
        .iter()
        .map(|f| without_tests(&std::fs::read_to_string(f).unwrap()).to_owned())
        .collect()
}

/// The variables the configuration code reads: its UPPER_SNAKE string literals.
fn config_variables() -> BTreeSet<String> {
    config_sources()
        .iter()
        .flat_map(|source| {
            string_literals(source)
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The variables the tools read: `env::var("X")` in any crate, and every UPPER_SNAKE word of
/// the scripts (`scripts/`, `bench/`, `.ci/`).
fn tool_variables() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for dir in ["shared", "functions", "koe-local", "testkit"] {
        for file in rust_files(dir) {
            let text = std::fs::read_to_string(file).unwrap();
            for call in ["var(\"", "var_os(\""] {
                for piece in text.split(call).skip(1) {
                    names.insert(piece.split('"').next().unwrap().to_owned());
                }
            }
        }
    }
    let mut stack: Vec<_> = ["scripts", "bench", ".ci"]
        .map(|d| repo_root().join(d))
        .into();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() && !path.ends_with("target") {
                stack.push(path);
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                let words = text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
                names.extend(
                    words
                        .filter(|w| upper_snake(w) == Some(*w))
                        .map(str::to_owned),
                );
            }
        }
    }
    names
}

/// The `const` and `static` items of every crate.
fn code_constants() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for dir in ["shared", "functions", "koe-local", "testkit"] {
        for file in rust_files(dir) {
            let text = std::fs::read_to_string(file).unwrap();
            names.extend(constants(&text).into_iter().map(str::to_owned));
        }
    }
    names
}

/// The backticked UPPER_SNAKE words of markdown `text` that `known` does not know.
fn unknown_words(text: &str, known: &impl Fn(&str) -> bool) -> Vec<(usize, String)> {
    code_spans(text)
        .into_iter()
        .filter(|(_, span)| upper_snake(span).is_some_and(|name| !known(name)))
        .collect()
}

#[test]
fn a_code_the_api_does_not_answer_is_unknown() {
    let codes = error_codes();
    let text = "A 503 `SERVICE_UNAVAILABLE`: retry.\n\nOr `STORE_UNAVAILABLE`, `STORE=dynamodb`.\n";
    let known = |name: &str| codes.contains(name) || name == "STORE";
    assert_eq!(
        unknown_words(text, &known),
        vec![(3, "STORE_UNAVAILABLE".to_owned())]
    );
}

#[test]
fn every_upper_snake_word_is_a_code_a_variable_or_a_constant() {
    let codes = error_codes();
    let config = config_variables();
    let tools = tool_variables();
    let consts = code_constants();
    assert!(codes.contains("SERVICE_UNAVAILABLE"), "{codes:?}");
    assert!(config.contains("AGENT_DAILY_LIMIT"), "{config:?}");
    let known = |name: &str| {
        let secret_arn = name
            .strip_suffix("_SECRET_ARN")
            .is_some_and(|var| config.contains(var));
        codes.contains(name)
            || config.contains(name)
            || tools.contains(name)
            || consts.contains(name)
            || ALLOWED.contains(&name)
            || secret_arn
    };
    let mut problems = Vec::new();
    for (file, text) in markdown() {
        for (line, span) in unknown_words(&text, &known) {
            problems.push(format!(
                "{}:{line}: `{span}`: no error code, no variable the code reads, no constant",
                file.display()
            ));
        }
    }
    report("UPPER_SNAKE words the code does not know", &problems);
}

/// Everything the configuration's sections make of `vars`, printed.
fn sections(vars: &Vars) -> String {
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        Config::from_vars(vars),
        LogConfig::from_vars(vars),
        AwsConfig::from_vars(vars),
        ApnsPoolConfig::from_vars(vars),
        PushSenderChoice::from_vars(vars),
    )
}

/// The names [`sections`] looks up with every variable unset.
fn names_read() -> BTreeSet<String> {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let recorder = seen.clone();
    sections(&Vars::from_fn(move |name| {
        recorder.lock().unwrap().insert(name.to_owned());
        None
    }));
    seen.lock().unwrap().clone()
}

/// A variable whose stated default is not a value it can be set to, with why.
const DEFAULT_AS_DESCRIBED: &[&str] = &[
    // `RUST_LOG` unset is kept as `None` and logging falls back to `info`: a filter is not
    // parsed by the configuration (docs/configuration.md says so).
    "RUST_LOG",
];

#[test]
fn every_default_in_the_configuration_table_is_the_codes() {
    let table = read(Path::new("docs/configuration.md"));
    let rows = default_rows(&table);
    assert!(
        rows.len() > 30,
        "only {} rows: is the reader broken?",
        rows.len()
    );
    let read_by_sections = names_read();
    let sources = config_sources().join("\n");
    let unset = sections(&Vars::from_pairs(&[]));
    let mut problems = Vec::new();
    let mut checked = 0;
    for (names, default) in rows {
        let Some(default) = default else { continue };
        for name in names
            .iter()
            .filter(|n| !DEFAULT_AS_DESCRIBED.contains(&n.as_str()))
        {
            checked += 1;
            if read_by_sections.contains(name) {
                let set = sections(&Vars::from_pairs(&[(name, &default)]));
                if set != unset {
                    problems.push(format!(
                        "{name}: the docs' default `{default}` is not the code's: set to it, the \
                         configuration differs from unset"
                    ));
                }
                continue;
            }
            match literal_default(&sources, name) {
                Some(code) if code == default => {}
                Some(code) => problems.push(format!(
                    "{name}: the docs say `{default}`, the code `{code}`"
                )),
                None => problems.push(format!("{name}: no default in the configuration code")),
            }
        }
    }
    assert!(checked > 20, "only {checked} defaults checked");
    report(
        "defaults of docs/configuration.md that are not the code's",
        &problems,
    );
}
