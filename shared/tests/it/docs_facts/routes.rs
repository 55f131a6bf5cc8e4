//! The route table of docs/architecture.md is the route list.

use std::collections::BTreeSet;
use std::path::Path;

use koe::app::STREAMED;

use koe::platform::endpoint::Api;
use koe::{ROUTES, Route};
use koe_testkit::template::repo_root;

use super::{read, report};

const PAGE: &str = "docs/architecture.md";
const HEADING: &str = "## The route table";

/// One row of the table: method, path, API, endpoint, handler, binary, function.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Row {
    method: String,
    path: String,
    api: String,
    endpoint: String,
    handler: String,
    binary: String,
    function: String,
}

/// The rows of the first table under [`HEADING`], backticks dropped.
fn table_rows(text: &str) -> Vec<Row> {
    let section = text
        .split(HEADING)
        .nth(1)
        .unwrap_or_else(|| panic!("{PAGE} has no {HEADING:?}"));
    section
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2) // the header and its rule
        .map(|line| {
            let cells: Vec<String> = line
                .trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().trim_matches('`').to_owned())
                .collect();
            assert_eq!(cells.len(), 7, "{PAGE}: a row of 7 cells: {line}");
            let [method, path, api, endpoint, handler, binary, function] =
                <[String; 7]>::try_from(cells).unwrap();
            Row {
                method,
                path,
                api,
                endpoint,
                handler,
                binary,
                function,
            }
        })
        .collect()
}

/// What the code says of a row: method, path, API, binary, function.
fn key(method: &str, path: &str, api: &str, binary: &str, function: &str) -> String {
    format!("{method} {path} ({api}) {binary} {function}")
}

fn route_key(route: &Route, api: &str) -> String {
    key(
        route.method.as_str(),
        route.path,
        api,
        route.binary,
        route.function,
    )
}

/// The rows the code has: every route of the list on its API, every streamed function.
fn code_keys() -> BTreeSet<String> {
    let routes = ROUTES.iter().map(|route| {
        let api = match route.api {
            Api::Chat => "chat",
            Api::Agent => "agent",
        };
        route_key(route, api)
    });
    let streamed = STREAMED.iter().map(|s| route_key(&s.route, "function URL"));
    routes.chain(streamed).collect()
}

/// The source of `impl Endpoint for NAME` up to the next endpoint, in a feature's `api.rs`.
fn endpoint_source(name: &str) -> Option<String> {
    let needle = format!("impl Endpoint for {name} {{");
    ["chat", "agent", "devices", "calls", "dispatch"]
        .iter()
        .find_map(|feature| {
            let text = read(&Path::new("shared/src").join(feature).join("api.rs"));
            let rest = text.split(&needle).nth(1)?;
            Some(rest.split("impl Endpoint for").next().unwrap().to_owned())
        })
}

#[test]
fn the_route_table_is_the_route_list() {
    let rows = table_rows(&read(Path::new(PAGE)));
    let documented: BTreeSet<String> = rows
        .iter()
        .map(|r| key(&r.method, &r.path, &r.api, &r.binary, &r.function))
        .collect();
    let code = code_keys();
    let mut problems = Vec::new();
    for missing in code.difference(&documented) {
        problems.push(format!("{PAGE}: no row for {missing}"));
    }
    for extra in documented.difference(&code) {
        problems.push(format!("{PAGE}: a row the code does not have: {extra}"));
    }
    if rows.len() != code.len() {
        problems.push(format!(
            "{PAGE}: {} rows for {} routes",
            rows.len(),
            code.len()
        ));
    }
    for row in &rows {
        let stem = Path::new(&row.handler)
            .file_stem()
            .map_or(String::new(), |s| s.to_string_lossy().into_owned());
        if !row.handler.starts_with("shared/src/") || !repo_root().join(&row.handler).is_file() {
            problems.push(format!(
                "{PAGE}: {}: no handler file {}",
                row.endpoint, row.handler
            ));
        }
        match endpoint_source(&row.endpoint) {
            None => problems.push(format!("{PAGE}: no `impl Endpoint for {}`", row.endpoint)),
            Some(source) => {
                if !source.contains(&format!("\"{}\"", row.function)) {
                    problems.push(format!(
                        "{PAGE}: {}'s route is not {}",
                        row.endpoint, row.function
                    ));
                }
                // The streamed endpoint's handler is the stream's (`edge::stream`).
                let streamed = row.api == "function URL";
                if !streamed && !source.contains(&format!("{stem}::")) {
                    problems.push(format!(
                        "{PAGE}: {}'s handle calls nothing in {}",
                        row.endpoint, row.handler
                    ));
                }
            }
        }
    }
    report("the route table of docs/architecture.md", &problems);
}

#[test]
fn table_rows_read_the_cells_under_the_heading() {
    let text = "# P\n\n## The route table\n\nText.\n\n| method | path | API | endpoint | handler | binary | function |\n\
                | --- | --- | --- | --- | --- | --- | --- |\n\
                | GET | /health | chat | `Health` | `shared/src/chat/meta.rs` | `health` | `HealthFunction` |\n\nAfter.\n";
    let rows = table_rows(text);
    assert_eq!(rows.len(), 1);
    assert_eq!(
        key(
            &rows[0].method,
            &rows[0].path,
            &rows[0].api,
            &rows[0].binary,
            &rows[0].function
        ),
        "GET /health (chat) health HealthFunction"
    );
    assert_eq!(rows[0].handler, "shared/src/chat/meta.rs");
}
