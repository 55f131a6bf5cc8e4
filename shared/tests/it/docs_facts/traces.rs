//! The claims of docs/architecture.md a machine can check: every `file.rs::name` a trace cites is
//! an item defined in that file (names do not drift as line numbers do, so no `path:line` is
//! cited anywhere); the deployed system's drawing names the template's resources and events; the
//! functions the dispatch binary serves are built from it.

use std::path::Path;

use koe_testkit::template::{load_yaml, repo_root};

use super::extract::code_spans;
use super::{PATH_BASES, markdown, prose, read, report};

const PAGE: &str = "docs/architecture.md";

/// The item keywords a cited name may be defined by.
const KEYWORDS: &[&str] = &[
    "fn", "struct", "enum", "trait", "type", "const", "static", "mod",
];

/// A `file.rs::Name::name` span: the file and the item's segments, or `None`.
fn trace(span: &str) -> Option<(&str, Vec<&str>)> {
    let (path, item) = span.split_once(".rs::")?;
    let ident = |s: &str| {
        !s.is_empty()
            && !s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let segments: Vec<&str> = item.trim_end_matches("()").split("::").collect();
    let plain_path = path.contains('/')
        && !path.contains(char::is_whitespace)
        && path.starts_with(|c: char| c.is_ascii_lowercase());
    (plain_path && segments.iter().all(|s| ident(s))).then(|| (&span[..path.len() + 3], segments))
}

/// Whether `source` defines `name` with one of [`KEYWORDS`] (`fn name(`, `struct Name<`, ...),
/// as a whole word.
fn defines(source: &str, name: &str) -> bool {
    KEYWORDS.iter().any(|keyword| {
        let needle = format!("{keyword} {name}");
        source.match_indices(&needle).any(|(at, _)| {
            let before = source[..at].chars().next_back();
            let after = source[at + needle.len()..].chars().next();
            !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    })
}

/// Whether `word` is a whole word of `source`.
fn has_word(source: &str, word: &str) -> bool {
    source
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| w == word)
}

/// What is wrong with a traced item (`None`: the file defines it).
fn trace_problem(path: &str, segments: &[&str]) -> Option<String> {
    let Some(file) = PATH_BASES
        .iter()
        .map(|base| repo_root().join(format!("{base}{path}")))
        .find(|full| full.is_file())
    else {
        return Some("no such file".to_owned());
    };
    let source = std::fs::read_to_string(file).unwrap();
    let (last, owners) = segments.split_last().unwrap();
    if !defines(&source, last) {
        return Some(format!(
            "the file defines no `{last}` (fn, struct, enum, trait, type, const, static, mod)"
        ));
    }
    owners
        .iter()
        .find(|owner| !has_word(&source, owner))
        .map(|owner| format!("the file never names `{owner}`"))
}

#[test]
fn every_traced_name_is_defined_in_its_file() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for (file, text) in prose() {
        for (line, span) in code_spans(&text) {
            let Some((path, segments)) = trace(&span) else {
                continue;
            };
            checked += 1;
            if let Some(problem) = trace_problem(path, &segments) {
                problems.push(format!("{}:{line}: `{span}`: {problem}", file.display()));
            }
        }
    }
    assert!(
        checked > 30,
        "only {checked} `file.rs::name` traces: is the reader broken?"
    );
    report("traced names their file does not define", &problems);
}

/// A `path:line` span (`shared/src/handlers/calls.rs:145`): a reference that drifts.
fn path_line(span: &str) -> bool {
    span.rsplit_once(':').is_some_and(|(path, line)| {
        line.parse::<usize>().is_ok()
            && path.contains('/')
            && path.contains('.')
            && !path.contains("//")
            && !path.contains(char::is_whitespace)
            && path.starts_with(|c: char| c.is_ascii_lowercase())
    })
}

#[test]
fn no_page_cites_a_line_number() {
    let mut problems = Vec::new();
    for (file, text) in markdown() {
        for (line, span) in code_spans(&text) {
            if path_line(&span) {
                problems.push(format!(
                    "{}:{line}: `{span}`: name the function (`file.rs::name`), not the line",
                    file.display()
                ));
            }
        }
    }
    report("line numbers cited", &problems);
}

/// The fenced drawing under "## The deployed system".
fn drawing(text: &str) -> &str {
    let section = text
        .split("## The deployed system")
        .nth(1)
        .expect("a deployed system section");
    section.split("```").nth(1).expect("a drawing")
}

/// What the drawing names that a template must have: resource names (`ChatApi`,
/// `DispatchPartFunction`), deployed names (`<stack>-devices`, `-scheduled-calls`), event
/// detail types (`"Koe Dispatch Wake"`) and the schedule (`cron(...)`).
fn drawn_names(drawing: &str) -> Vec<String> {
    let mut names = Vec::new();
    for word in drawing.split(|c: char| c.is_whitespace() || c == ',') {
        let word = word.trim_matches(|c: char| "(){}:;".contains(c));
        let resource = word.ends_with("Function") || word.ends_with("Api") || word == "AlarmTopic";
        if resource && word.starts_with(|c: char| c.is_ascii_uppercase()) {
            names.push(word.to_owned());
        } else if let Some(rest) = word.strip_prefix("<stack>") {
            let rest = rest.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
            if rest.starts_with('-') {
                names.push(rest.to_owned());
            }
        } else if word.starts_with('-') && word.len() > 2 {
            names.push(word.to_owned());
        }
    }
    names.extend(
        drawing
            .split('"')
            .skip(1)
            .step_by(2)
            .filter(|quoted| quoted.starts_with("Koe "))
            .map(str::to_owned),
    );
    if let Some(cron) = drawing.split("cron(").nth(1) {
        names.push(format!("cron({}", &cron[..=cron.find(')').unwrap()]));
    }
    names
}

#[test]
fn the_deployed_system_is_the_templates() {
    let template = read(Path::new("template.yaml"));
    let names = drawn_names(drawing(&read(Path::new(PAGE))));
    assert!(names.len() > 15, "only {names:?}: is the reader broken?");
    let problems: Vec<String> = names
        .iter()
        .filter(|name| !template.contains(name.as_str()))
        .map(|name| format!("{PAGE}: the drawing names {name}, template.yaml does not"))
        .collect();
    report("the deployed system's drawing", &problems);
}

#[test]
fn the_dispatch_binary_serves_the_functions_the_page_names() {
    let page = read(Path::new(PAGE));
    let sentence = page
        .split("The dispatch binary serves ")
        .nth(1)
        .and_then(|rest| rest.split(". ").next())
        .expect("architecture.md names the functions of the dispatch binary");
    let template = load_yaml("template.yaml");
    let named: Vec<&str> = sentence
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|n| n.ends_with("Function"))
        .collect();
    assert!(named.len() >= 3, "{sentence}");
    let problems: Vec<String> = named
        .iter()
        .filter(|name| {
            template["Resources"][**name]["Metadata"]["BuildProperties"]["Binary"].as_str()
                != Some("dispatch")
        })
        .map(|name| format!("{PAGE}: {name} is not built from the dispatch binary"))
        .collect();
    report("the dispatch binary's functions", &problems);
}

#[test]
fn traces_are_file_and_item() {
    assert_eq!(
        trace("shared/src/edge/mod.rs::Service::handle"),
        Some(("shared/src/edge/mod.rs", vec!["Service", "handle"]))
    );
    assert_eq!(
        trace("functions/src/bin/dispatch.rs::main()"),
        Some(("functions/src/bin/dispatch.rs", vec!["main"]))
    );
    for not in [
        "shared/src/lib.rs",
        "koe::push::pool::PushPool",
        "shared/src/x.rs:12",
        "a b.rs::c",
    ] {
        assert_eq!(trace(not), None, "{not}");
    }
    assert!(path_line("shared/src/handlers/calls.rs:145"));
    assert!(!path_line("127.0.0.1:3000"));
    assert!(!path_line("shared/src/lib.rs"));
}

#[test]
fn definitions_are_whole_words_after_a_keyword() {
    let source = "pub async fn handle_event() {}\nstruct Service<E> {}\nconst MAX_X: u8 = 1;";
    assert!(defines(source, "handle_event"));
    assert!(defines(source, "Service"));
    assert!(defines(source, "MAX_X"));
    assert!(!defines(source, "handle"), "a prefix of another name");
    assert!(!defines(source, "MAX"));
    assert_eq!(
        drawn_names(
            "A {x}   B\n ChatApi <stack>-devices, -agent-usage \"Koe X Y\" cron(* *) ─▶ DispatchFunction"
        ),
        [
            "ChatApi",
            "-devices",
            "-agent-usage",
            "DispatchFunction",
            "Koe X Y",
            "cron(* *)"
        ]
    );
}
