//! The route table is the code (docs/architecture.md, "The route table"): every endpoint a
//! feature defines is in its `Endpoints`, and docs/local.md's fixture table has a row for each
//! route's fixture naming its function.

use std::path::Path;

use koe::ROUTES;
use koe::app::STREAMED;

use koe_testkit::template::repo_root;

use super::{read, report};

const PAGE: &str = koe_testkit::local_doc::LOCAL_DOC;

/// The endpoint types a feature's `api.rs` defines (`impl Endpoint for NAME`) and the ones its
/// `pub type Endpoints = (...)` names.
fn defined_and_listed(source: &str) -> (Vec<String>, Vec<String>) {
    let defined = source
        .split("impl Endpoint for ")
        .skip(1)
        .map(|rest| rest.split_whitespace().next().unwrap().to_owned())
        .collect();
    let listed = source
        .split("pub type Endpoints = (")
        .nth(1)
        .map(|rest| {
            rest.split(')')
                .next()
                .unwrap()
                .split(',')
                .map(|name| name.trim().to_owned())
                .filter(|name| !name.is_empty())
                .collect()
        })
        .unwrap_or_default();
    (defined, listed)
}

#[test]
fn every_endpoint_is_listed_and_every_route_has_its_fixture_row() {
    let mut problems = Vec::new();
    let streamed: Vec<&str> = STREAMED.iter().map(|s| s.route.binary).collect();
    // Every feature: each folder of the library with an `api.rs`.
    let mut features: Vec<String> = std::fs::read_dir(repo_root().join("shared/src"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|dir| dir.join("api.rs").is_file())
        .map(|dir| dir.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    features.sort();
    assert!(
        features.len() >= 5,
        "the feature folders are found: {features:?}"
    );
    for feature in &features {
        let file = format!("shared/src/{feature}/api.rs");
        let (defined, listed) = defined_and_listed(&read(Path::new(&file)));
        for name in defined.iter().filter(|name| !listed.contains(name)) {
            // A streamed endpoint has a function of its own, listed in `app::STREAMED`.
            let binary = name.to_lowercase();
            if !streamed.iter().any(|s| s.replace('-', "") == binary) {
                problems.push(format!("{file}: {name} is not in its `Endpoints`"));
            }
        }
    }
    let rows = koe_testkit::local_doc::fixture_rows_of(&read(Path::new(PAGE)));
    let routes = ROUTES.iter().chain(STREAMED.iter().map(|s| &s.route));
    let mut count = 0;
    for route in routes {
        count += 1;
        match rows.get(route.binary) {
            Some(row) if row.function == route.function => {}
            Some(row) => problems.push(format!(
                "{PAGE}: events/{}.json is for {}, the route's function is {}",
                route.binary, row.function, route.function
            )),
            None => problems.push(format!(
                "{PAGE}: no row for events/{}.json ({} {})",
                route.binary, route.method, route.path
            )),
        }
    }
    assert!(count > features.len(), "the route list is read");
    report("the route table and docs/local.md's fixtures", &problems);
}

#[test]
fn fixture_rows_and_endpoint_lists_are_read_as_written() {
    let text = "# P\n\n## Fixtures and local invocation\n\nText.\n\n| Fixture | Function | Answer |\n\
                |---|---|---|\n\
                | `events/health.json` | HealthFunction | 200, `{\"status\":\"ok\"}` |\n\nAfter.\n| x | y | z |\n";
    let rows = koe_testkit::local_doc::fixture_rows_of(text);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows["health"].function, "HealthFunction");
    let source =
        "pub type Endpoints = (Chat, Info,);\nimpl Endpoint for Chat {}\nimpl Endpoint for Gone {}";
    assert_eq!(
        defined_and_listed(source),
        (
            vec!["Chat".to_owned(), "Gone".to_owned()],
            vec!["Chat".to_owned(), "Info".to_owned()]
        )
    );
}
