//! The code's shape: in `shared/src`, the feature folders (each with its `api.rs`, as many as
//! the product has) and at most 7 other top-level modules; no two of them import each other,
//! directly or through others (the layers run one way), and no two files either, inside a
//! folder or across; and every source file of the workspace's packages opens with its `//!`
//! summary. (No line cap: a file is as long as its one concern needs.)

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
    assert!(graph.contains_key("chat") && graph["app"].contains("chat"));
    if let Some(way) = circle(&graph) {
        panic!("import circle in shared/src: {}", way.join(" -> "));
    }
}

#[test]
fn the_circle_check_finds_a_circle() {
    let mut graph = imports();
    graph.get_mut("domain").unwrap().insert("app".into());
    assert!(circle(&graph).is_some());
}

/// At most this many top-level modules besides the features (docs/architecture.md, "Layers of
/// the library"); the features, folders with an `api.rs`, are as many as the product has.
const MOST_LAYER_MODULES: usize = 7;

#[test]
fn shared_src_has_at_most_seven_top_level_modules_besides_the_features() {
    let modules: BTreeSet<String> = library_files()
        .into_iter()
        .filter(|(rel, _)| rel != "lib.rs")
        .map(|(rel, _)| {
            rel.split('/')
                .next()
                .unwrap()
                .trim_end_matches(".rs")
                .to_owned()
        })
        .collect();
    let src = repo_root().join("shared/src");
    let (features, layers): (BTreeSet<String>, BTreeSet<String>) = modules
        .into_iter()
        .partition(|module| src.join(module).join("api.rs").is_file());
    assert!(
        features.contains("calls") && layers.contains("platform"),
        "{features:?} {layers:?}"
    );
    assert!(
        layers.len() <= MOST_LAYER_MODULES,
        "{} top-level modules in shared/src besides the features {features:?} (at most \
         {MOST_LAYER_MODULES}): {layers:?}",
        layers.len()
    );
}

/// A file's module path from `shared/src`: `dispatch/run.rs` is `dispatch::run`,
/// `dispatch/mod.rs` is `dispatch`.
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    parts
}

/// The module paths `text` names from `crate::`, `super::` or `self::` (in `module`), a
/// `{...}` group read as one path per item. A `pub use` hands names on (a folder's face) and
/// names nothing its file's code depends on: it is left out.
fn named_paths(module: &[String], is_dir_module: bool, text: &str) -> Vec<Vec<String>> {
    let mut code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join(" ");
    for face in ["pub use ", "pub(crate) use "] {
        while let Some(start) = code.find(face) {
            let end = code[start..]
                .find(';')
                .map_or(code.len(), |e| start + e + 1);
            code.replace_range(start..end, " ");
        }
    }
    let word = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    let mut paths = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut at = 0;
    while at < bytes.len() {
        let rest: String = bytes[at..].iter().take(8).collect();
        let root = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|r| rest.starts_with(r));
        let before_ok = at == 0 || !(word(bytes[at - 1]) || bytes[at - 1] == ':');
        let Some(root) = root.filter(|_| before_ok) else {
            at += 1;
            continue;
        };
        // Where the path starts, as module segments.
        let mut base: Vec<String> = match root {
            "crate::" => Vec::new(),
            "self::" if is_dir_module => module.to_vec(),
            "self::" => module[..module.len().saturating_sub(1)].to_vec(),
            _ if is_dir_module => module[..module.len().saturating_sub(1)].to_vec(),
            _ => module[..module.len().saturating_sub(1)].to_vec(),
        };
        at += root.len();
        // `super::super::`
        while bytes[at..].iter().take(7).collect::<String>() == "super::" {
            base.pop();
            at += 7;
        }
        let mut segment = String::new();
        let mut prefix = base.clone();
        loop {
            match bytes.get(at) {
                Some(&c) if word(c) => segment.push(c),
                Some(':') if bytes.get(at + 1) == Some(&':') => {
                    prefix.push(std::mem::take(&mut segment));
                    at += 1;
                }
                Some('{') => {
                    let close = bytes[at..]
                        .iter()
                        .position(|&c| c == '}')
                        .map_or(bytes.len(), |p| at + p);
                    let group: String = bytes[at + 1..close].iter().collect();
                    for item in group.split(',') {
                        let mut path = prefix.clone();
                        for part in item.trim().split("::") {
                            if part.chars().all(word) && !part.is_empty() {
                                path.push(part.to_owned());
                            } else {
                                break;
                            }
                        }
                        paths.push(path);
                    }
                    at = close;
                    break;
                }
                _ => {
                    if !segment.is_empty() {
                        prefix.push(std::mem::take(&mut segment));
                    }
                    paths.push(prefix.clone());
                    break;
                }
            }
            at += 1;
        }
    }
    paths
}

/// For each file of the library (as its path from `shared/src`), the other files whose modules
/// its code names.
fn file_imports() -> BTreeMap<String, BTreeSet<String>> {
    let files = library_files();
    let by_module: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|(rel, _)| (module_of(rel), rel.clone()))
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, file) in &files {
        if rel == "lib.rs" {
            continue;
        }
        let module = module_of(rel);
        let text = std::fs::read_to_string(file).unwrap();
        let names = graph.entry(rel.clone()).or_default();
        for path in named_paths(&module, rel.ends_with("mod.rs"), &text) {
            // The longest start of the path that is a file's module.
            let target = (1..=path.len())
                .rev()
                .find_map(|n| by_module.get(&path[..n]));
            if let Some(target) = target.filter(|t| *t != rel && t.as_str() != "lib.rs") {
                names.insert(target.clone());
            }
        }
    }
    graph
}

#[test]
fn no_file_imports_one_that_imports_it_back() {
    let graph = file_imports();
    assert!(
        graph["chat/stream.rs"].contains("chat/handler.rs"),
        "the reader misses `super::` paths: {:?}",
        graph["chat/stream.rs"]
    );
    assert!(
        graph["app/mod.rs"].contains("chat/api.rs"),
        "{:?}",
        graph["app/mod.rs"]
    );
    if let Some(way) = circle(&graph) {
        panic!(
            "import circle between files of shared/src: {}",
            way.join(" -> ")
        );
    }
}

#[test]
fn the_file_circle_check_finds_a_circle_inside_a_folder() {
    let mut graph = file_imports();
    graph
        .get_mut("chat/handler.rs")
        .unwrap()
        .insert("chat/stream.rs".into());
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
