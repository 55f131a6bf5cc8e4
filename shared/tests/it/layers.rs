//! The library's shape: no two top-level modules of `shared/src` import each other, directly or
//! through others (the layers run one way), and no file is over ~400 lines except the ones
//! docs/architecture.md names with the reason.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use koe_testkit::template::repo_root;

/// Files allowed past 400 lines (docs/architecture.md, "Where things are"), with the most they
/// may have.
const LONG_FILES: &[(&str, usize)] = &[("domain/agent.rs", 520)];
const MAX_LINES: usize = 400;

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every source file of the library, with its path relative to `shared/src`.
fn library_files() -> Vec<(String, std::path::PathBuf)> {
    let src = repo_root().join("shared/src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files
        .into_iter()
        .map(|file| {
            let rel = file
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (rel, file)
        })
        .collect()
}

/// For each top-level module, the other top-level modules its code names as `crate::x`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, file) in library_files() {
        if rel == "lib.rs" {
            continue;
        }
        let top = rel
            .split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_owned();
        let text = std::fs::read_to_string(&file).unwrap();
        let names = graph.entry(top.clone()).or_default();
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            let mut rest = line;
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !name.is_empty() && name != top {
                    names.insert(name);
                }
            }
        }
    }
    graph
}

/// A module that can reach itself through the graph, with the way round.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    for start in graph.keys() {
        let mut stack = vec![vec![start.clone()]];
        let mut seen = BTreeSet::new();
        while let Some(path) = stack.pop() {
            let last = path.last().unwrap();
            for next in graph.get(last).into_iter().flatten() {
                let mut longer = path.clone();
                longer.push(next.clone());
                if next == start {
                    return Some(longer);
                }
                if seen.insert(next.clone()) {
                    stack.push(longer);
                }
            }
        }
    }
    None
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let graph = imports();
    assert!(graph.contains_key("handlers") && graph["routes"].contains("handlers"));
    if let Some(way) = circle(&graph) {
        panic!("import circle in shared/src: {}", way.join(" -> "));
    }
}

#[test]
fn the_circle_check_finds_a_circle() {
    let mut graph = imports();
    graph.get_mut("domain").unwrap().insert("wiring".into());
    assert!(circle(&graph).is_some());
}

#[test]
fn files_stay_short_except_the_named_ones() {
    for (rel, file) in library_files() {
        let lines = std::fs::read_to_string(&file).unwrap().lines().count();
        let max = LONG_FILES
            .iter()
            .find(|(name, _)| *name == rel)
            .map_or(MAX_LINES, |(_, max)| *max);
        assert!(
            lines <= max,
            "shared/src/{rel} has {lines} lines (at most {max})"
        );
    }
}
