//! The code's shape: no two top-level modules of `shared/src` import each other, directly or
//! through others (the layers run one way), and every source file of the workspace's packages
//! opens with its `//!` summary. (No line cap: a file is as long as its one concern needs.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use koe_testkit::template::repo_root;

/// The source folders of the workspace's packages (`members` in Cargo.toml).
const PACKAGE_DIRS: &[&str] = &[
    "shared/src",
    "shared/tests",
    "testkit",
    "functions",
    "koe-local",
    "bench/bins",
];

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|name| name == "target") {
                continue;
            }
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
    assert!(graph.contains_key("chat") && graph["routes"].contains("chat"));
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

/// A binary's root (`src/bin/*.rs`, `src/main.rs`): it needs no `//!` summary, other files do.
fn is_binary_root(rel: &str) -> bool {
    rel.contains("/src/bin/") || rel.ends_with("/src/main.rs")
}

#[test]
fn every_source_file_opens_with_its_summary() {
    let root = repo_root();
    let mut files = Vec::new();
    for dir in PACKAGE_DIRS {
        sources(&root.join(dir), &mut files);
    }
    assert!(files.len() > 100, "found only {} files", files.len());
    let mut problems = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&file).unwrap();
        if !is_binary_root(&rel) && !text.starts_with("//!") {
            problems.push(format!("{rel} does not open with a `//!` summary"));
        }
    }
    problems.sort();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
