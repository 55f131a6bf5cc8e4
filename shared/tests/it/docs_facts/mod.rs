//! What the docs name exists, where a machine can tell: in README.md and `docs/*.md` every
//! repository path in backticks is a file or folder, every `file.rs::name` a trace cites is an
//! item defined in that file (names do not drift as line numbers do), and every test filter
//! shown finds a test (`filters`). Figures are not parsed from prose: the tables that state
//! them are written from the code (`docs_tables.rs`).

mod filters;

use std::path::PathBuf;

use koe_testkit::template::repo_root;

/// README.md and `docs/*.md` (docs_links' list), relative to the root, with their text.
fn markdown() -> Vec<(PathBuf, String)> {
    let files = super::docs_links::markdown_files().into_iter();
    files
        .map(|f| (f.clone(), super::docs_links::read(&f)))
        .collect()
}

fn report(what: &str, problems: &[String]) {
    assert!(problems.is_empty(), "{what}:\n{}", problems.join("\n"));
}

/// The inline code spans of markdown text (fenced blocks skipped), with the line each starts on.
/// A span may cross a line break, not a blank line.
fn code_spans(text: &str) -> Vec<(usize, String)> {
    let mut spans = Vec::new();
    let (mut paragraph, mut first_line, mut in_fence) = (Vec::new(), 0, false);
    let mut flush = |paragraph: &mut Vec<&str>, mut line: usize| {
        for (i, piece) in paragraph.join("\n").split('`').enumerate() {
            if i % 2 == 1 && !piece.is_empty() {
                spans.push((line, piece.to_owned()));
            }
            line += piece.matches('\n').count();
        }
        paragraph.clear();
    };
    for (number, line) in text.lines().enumerate() {
        let fence = line.trim_start().starts_with("```") || line.trim_start().starts_with("~~~");
        if fence || in_fence || line.trim().is_empty() {
            flush(&mut paragraph, first_line);
            in_fence ^= fence;
            continue;
        }
        if paragraph.is_empty() {
            first_line = number + 1;
        }
        paragraph.push(line);
    }
    flush(&mut paragraph, first_line);
    spans
}

/// Where a path that does not start at the root may be relative to: a crate's source, a crate.
const PATH_BASES: &[&str] = &["", "shared/src/", "shared/", "shared/tests/"];

/// A repository path (`shared/src/x.rs`, `bench/`, `shared/tests/it/faults_*.rs`): one word
/// with a `/` that starts with a top-level entry or names Rust source, no URL or placeholder.
fn path_like(span: &str, top: &[String]) -> Option<String> {
    let path = span.split(':').next().unwrap_or("");
    let odd = |c: char| c.is_whitespace() || "<>${}=()'\"@".contains(c);
    let plain = path.contains('/')
        && !path.starts_with('/')
        && !path.contains("//")
        && !path.contains(odd)
        && path.starts_with(|c: char| c.is_ascii_lowercase() || c == '.');
    let first = path.split('/').next().unwrap();
    let ours = top.iter().any(|t| t == first) || path.ends_with(".rs") || path.ends_with('/');
    (plain && ours).then(|| path.to_owned())
}

/// Whether a named path exists; `*` in its file name matches any file of its folder.
fn path_exists(path: &str) -> bool {
    PATH_BASES.iter().any(|base| {
        let full = repo_root().join(format!("{base}{path}"));
        let name = full.file_name().unwrap().to_string_lossy().into_owned();
        let Some((head, tail)) = name.split_once('*') else {
            return full.exists();
        };
        let entries = std::fs::read_dir(full.parent().unwrap())
            .into_iter()
            .flatten();
        entries.flatten().any(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(head) && n.ends_with(tail)
        })
    })
}

#[test]
fn every_path_named_exists() {
    let top: Vec<String> = std::fs::read_dir(repo_root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let (mut problems, mut checked) = (Vec::new(), 0);
    for (file, text) in markdown() {
        for (line, span) in code_spans(&text) {
            let Some(path) = path_like(&span, &top) else {
                continue;
            };
            checked += 1;
            if !path_exists(&path) {
                problems.push(format!("{}:{line}: `{span}`: no such path", file.display()));
            }
        }
    }
    assert!(checked > 50, "only {checked} paths: is the reader broken?");
    report("paths named in the docs that do not exist", &problems);
}

/// A `file.rs::Name::name` span: the file and the item's segments, or `None`.
fn trace(span: &str) -> Option<(&str, Vec<&str>)> {
    let (path, item) = span.split_once(".rs::")?;
    let ident = |s: &&str| {
        !s.is_empty()
            && !s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let segments: Vec<&str> = item.trim_end_matches("()").split("::").collect();
    let plain_path = path.contains('/')
        && !path.contains(char::is_whitespace)
        && path.starts_with(|c: char| c.is_ascii_lowercase());
    (plain_path && segments.iter().all(ident)).then(|| (&span[..path.len() + 3], segments))
}

/// What is wrong with a traced item (`None`: the file defines its last segment with a keyword,
/// as a whole word, and names the others).
fn trace_problem(path: &str, segments: &[&str]) -> Option<String> {
    let Some(file) = PATH_BASES
        .iter()
        .map(|base| repo_root().join(format!("{base}{path}")))
        .find(|full| full.is_file())
    else {
        return Some("no such file".to_owned());
    };
    let source = std::fs::read_to_string(file).unwrap();
    let words: Vec<&str> = source
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    let keywords = "fn struct enum trait type const static mod";
    let (last, owners) = segments.split_last().unwrap();
    let defined = words
        .windows(2)
        .any(|w| keywords.split(' ').any(|k| k == w[0]) && w[1] == *last);
    if !defined {
        return Some(format!("the file defines no `{last}` ({keywords})"));
    }
    let owner = owners.iter().find(|owner| !words.contains(owner))?;
    Some(format!("the file never names `{owner}`"))
}

#[test]
fn every_traced_name_is_defined_in_its_file() {
    let (mut problems, mut checked) = (Vec::new(), 0);
    for (file, text) in markdown() {
        for (line, span) in code_spans(&text) {
            let at = format!("{}:{line}: `{span}`", file.display());
            let Some((path, segments)) = trace(&span) else {
                continue;
            };
            checked += 1;
            if let Some(problem) = trace_problem(path, &segments) {
                problems.push(format!("{at}: {problem}"));
            }
        }
    }
    assert!(checked > 30, "only {checked} traces: is the reader broken?");
    report("traces that do not hold", &problems);
}

#[test]
fn the_readers_read_as_written() {
    let text = "# T\n\nSay `A_B` and\n`C` then `d\ne`.\n\n```sh\nx `NO` y\n```\n`LAST`\n";
    let spans = code_spans(text);
    let spans: Vec<(usize, &str)> = spans.iter().map(|(l, s)| (*l, s.as_str())).collect();
    assert_eq!(spans, [(3, "A_B"), (4, "C"), (4, "d\ne"), (10, "LAST")]);
    let top = ["shared".to_owned(), "bench".to_owned()];
    assert_eq!(
        path_like("shared/src/lib.rs:12", &top).as_deref(),
        Some("shared/src/lib.rs")
    );
    for not in [
        "/calls",
        "https://a.b/v1",
        "<stack>/salt",
        "Koe/Api",
        "POST /x",
        "x/y",
    ] {
        assert_eq!(path_like(not, &top), None, "{not}");
    }
    assert_eq!(
        trace("shared/src/edge/mod.rs::Service::handle"),
        Some(("shared/src/edge/mod.rs", vec!["Service", "handle"]))
    );
    for not in ["shared/src/lib.rs", "koe::push::PushPool", "a b.rs::c"] {
        assert_eq!(trace(not), None, "{not}");
    }
}
