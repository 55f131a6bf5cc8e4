//! The docs state what the code does, where a machine can tell: in README.md and `docs/*.md`
//! every backticked UPPER_SNAKE word is an error code of `koe::platform::error::ErrorCode`, a variable
//! the code reads, a constant of the code or an allowed outside name; every default of
//! docs/configuration.md's table is the code's; every repository path and every `koe::` module
//! path named exists (in the library's doc comments too); every `cargo ... -p NAME` names a
//! package of the workspace; and a few figures stated in prose agree with the code or with the
//! table beside them (`figures`); docs/architecture.md's route table is the route list (`routes`),
//! every `file.rs::name` it traces is defined there and its other claims hold (`traces`); every
//! test filter shown finds a test (`filters`). The runbook's alarm table is held to the template by `alarm_evaluation/`.

mod extract;
mod figures;
mod filters;
mod names;
mod routes;
mod traces;

use std::path::{Path, PathBuf};

use koe_testkit::template::repo_root;

use extract::{cargo_packages, code_spans, doc_comments, module_path, path_like};

/// README.md and `docs/*.md`, relative to the repository root, with their text.
fn markdown() -> Vec<(PathBuf, String)> {
    let mut files = vec![PathBuf::from("README.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(repo_root().join("docs"))
        .unwrap()
        .map(|entry| Path::new("docs").join(entry.unwrap().file_name()))
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    files.extend(pages);
    files.into_iter().map(|f| (f.clone(), read(&f))).collect()
}

/// Rust files whose doc comments are held to the paths and modules they name.
const COMMENTED_SOURCES: &[&str] = &["shared/src/lib.rs", "shared/src/app/mod.rs"];

/// The markdown, and the doc comments of [`COMMENTED_SOURCES`] as markdown.
fn prose() -> Vec<(PathBuf, String)> {
    let mut all = markdown();
    for source in COMMENTED_SOURCES {
        all.push((
            PathBuf::from(source),
            doc_comments(&read(Path::new(source))),
        ));
    }
    all
}

fn read(file: &Path) -> String {
    std::fs::read_to_string(repo_root().join(file))
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// Every `.rs` file under `dir` (relative to the root), recursively.
fn rust_files(dir: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![repo_root().join(dir)];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out
}

fn report(what: &str, problems: &[String]) {
    assert!(problems.is_empty(), "{what}:\n{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Paths and modules.

/// Where a path that does not start at the root may be relative to: a crate's source, a crate.
const PATH_BASES: &[&str] = &["", "shared/src/", "shared/", "shared/tests/"];

/// Whether a named path exists; `*` in its file name matches any file of its folder.
fn path_exists(path: &str) -> bool {
    let root = repo_root();
    PATH_BASES.iter().any(|base| {
        let full = format!("{base}{path}");
        match full.rsplit_once('/') {
            Some((dir, name)) if name.contains('*') => {
                let (head, tail) = name.split_once('*').unwrap();
                std::fs::read_dir(root.join(dir)).is_ok_and(|entries| {
                    entries.flatten().any(|e| {
                        let n = e.file_name().to_string_lossy().into_owned();
                        n.starts_with(head) && n.ends_with(tail)
                    })
                })
            }
            _ => root.join(&full).exists(),
        }
    })
}

/// Top-level entries of the repository: a path starting with one is a repository path.
fn top_level() -> Vec<String> {
    std::fs::read_dir(repo_root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn every_path_named_exists() {
    let top = top_level();
    let mut problems = Vec::new();
    let mut checked = 0;
    for (file, text) in prose() {
        for (line, span) in code_spans(&text) {
            let Some(path) = path_like(&span) else {
                continue;
            };
            let first = path.split('/').next().unwrap();
            let repository_path = top.iter().any(|t| t == first);
            let source_path = path.ends_with(".rs") || path.ends_with('/');
            if !repository_path && !source_path {
                continue;
            }
            checked += 1;
            if !path_exists(path) {
                problems.push(format!("{}:{line}: `{span}`: no such path", file.display()));
            }
        }
    }
    assert!(checked > 50, "only {checked} paths: is the reader broken?");
    report("paths named in the docs that do not exist", &problems);
}

/// The crate roots a module path may start at, by the name it is used under.
fn crate_source(name: &str) -> Option<&'static str> {
    match name {
        "koe" | "crate" => Some("shared/src"),
        "koe_testkit" => Some("testkit/src"),
        "koe_local" => Some("koe-local/src"),
        _ => None,
    }
}

/// Whether `item` is defined (or re-exported) in one of `files`.
fn defines(files: &[PathBuf], item: &str) -> bool {
    let keywords = [
        "fn",
        "struct",
        "enum",
        "trait",
        "type",
        "const",
        "static",
        "mod",
        "macro_rules!",
    ];
    files.iter().any(|file| {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let word = |w: &str| {
            w.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|p| p == item)
        };
        keywords
            .iter()
            .any(|k| text.contains(&format!("{k} {item}")))
            || text
                .lines()
                .any(|l| l.trim_start().starts_with("pub use") && word(l))
            || text.contains(&format!("    {item},"))
            || text.contains(&format!("    {item}("))
            || text.contains(&format!("    {item} {{"))
    })
}

/// What is wrong with a module path (`None`: it resolves, or it is not one of ours).
fn module_problem(segments: &[&str]) -> Option<String> {
    let root = repo_root();
    let (src, rest) = match crate_source(segments[0]) {
        Some(src) => (src, &segments[1..]),
        None => {
            let module = root.join("shared/src").join(segments[0]);
            let ours = module.is_dir() || module.with_extension("rs").is_file();
            if !ours {
                return None;
            }
            ("shared/src", segments)
        }
    };
    let mut dir = root.join(src);
    let mut files = vec![dir.join("lib.rs")];
    let mut at = 0;
    while let Some(segment) = rest.get(at) {
        let file = dir.join(format!("{segment}.rs"));
        let folder = dir.join(segment);
        if file.is_file() {
            files = vec![file];
        } else if folder.join("mod.rs").is_file() {
            files = vec![folder.join("mod.rs")];
        } else {
            break;
        }
        dir = folder;
        at += 1;
    }
    let item = rest.get(at)?;
    if dir.is_dir() {
        files.extend(rust_files(
            dir.strip_prefix(&root).unwrap().to_str().unwrap(),
        ));
    }
    (!defines(&files, item)).then(|| format!("no `{item}` in {}", dir.display()))
}

#[test]
fn every_module_path_named_exists() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for (file, text) in prose() {
        for (line, span) in code_spans(&text) {
            let Some(segments) = module_path(&span) else {
                continue;
            };
            checked += 1;
            if let Some(problem) = module_problem(&segments) {
                problems.push(format!("{}:{line}: `{span}`: {problem}", file.display()));
            }
        }
    }
    assert!(
        checked > 10,
        "only {checked} module paths: is the reader broken?"
    );
    report(
        "module paths named in the docs that do not exist",
        &problems,
    );
}

// ---------------------------------------------------------------------------------------------
// Cargo packages.

/// The workspace's packages, by the `name` of each member's `[package]`.
fn packages() -> Vec<String> {
    let workspace = read(Path::new("Cargo.toml"));
    let members = workspace
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("the workspace lists its members");
    members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|member| {
            let manifest = read(&Path::new(member).join("Cargo.toml"));
            let package = manifest.split("[package]").nth(1).unwrap();
            let line = package.lines().find(|l| l.starts_with("name")).unwrap();
            line.split('"').nth(1).unwrap().to_owned()
        })
        .collect()
}

#[test]
fn every_cargo_package_named_is_one_of_the_workspace() {
    let packages = packages();
    assert!(packages.iter().any(|p| p == "koe-shared"), "{packages:?}");
    assert!(
        !packages.iter().any(|p| p == "koe"),
        "koe is the library, not a package"
    );
    let mut problems = Vec::new();
    for (file, text) in markdown() {
        for (number, line) in text.lines().enumerate() {
            for package in cargo_packages(line) {
                if !packages.iter().any(|p| p == package) {
                    problems.push(format!(
                        "{}:{}: `-p {package}`: the workspace's packages are {}",
                        file.display(),
                        number + 1,
                        packages.join(", ")
                    ));
                }
            }
        }
    }
    report(
        "cargo commands naming no package of the workspace",
        &problems,
    );
}
