//! Every `cargo test -p koe-shared --test it FILTER` the docs show finds a test: a suite's name
//! (or its beginning), or a path of modules down to a test function or module.

use std::path::PathBuf;

use koe_testkit::template::repo_root;

use super::{markdown, report};

/// The filters after `--test it` in a line of the docs (none for `-- ...` options or a
/// `<placeholder>`).
fn it_filters(line: &str) -> Vec<&str> {
    line.split("--test it ")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next())
        .map(|word| word.trim_end_matches(['`', ',', ')', '.']))
        .filter(|filter| !filter.starts_with(['-', '<']) && !filter.is_empty())
        .collect()
}

/// Modules a file's tests sit in without a file of their own (`on_each_store!` and the
/// suites' own macros make them).
const MACRO_MODULES: &[&str] = &["memory", "dynamodb"];

/// Why cargo's filter `filter` (a substring of `module::...::test`) finds no test of the `it`
/// binary, or `None`. Without `::` it is a prefix of a suite's name; with `::` each segment is
/// followed as a module (a file, a folder's `mod.rs`, or a `mod` in the file) and the last must
/// be a test function or a module.
fn filter_problem(filter: &str) -> Option<String> {
    let base = repo_root().join("shared/tests/it");
    let segments: Vec<&str> = filter.split("::").filter(|s| !s.is_empty()).collect();
    let (last, path) = segments.split_last()?;
    if path.is_empty() {
        let found = std::fs::read_dir(&base)
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().starts_with(last));
        return (!found).then(|| format!("no suite of shared/tests/it starts with `{last}`"));
    }
    let mut dir = base.clone();
    let mut file: Option<PathBuf> = None;
    let text = |f: &Option<PathBuf>| f.as_ref().map(std::fs::read_to_string);
    let text = |f: &Option<PathBuf>| text(f).map(Result::unwrap).unwrap_or_default();
    for (depth, segment) in path.iter().enumerate() {
        let (as_file, as_dir) = (dir.join(format!("{segment}.rs")), dir.join(segment));
        if as_file.is_file() {
            file = Some(as_file);
            dir = as_dir;
        } else if as_dir.join("mod.rs").is_file() {
            file = Some(as_dir.join("mod.rs"));
            dir = as_dir;
        } else if depth > 0
            && (MACRO_MODULES.contains(segment) || text(&file).contains(&format!("mod {segment}")))
        {
            continue;
        } else {
            return Some(format!("no module `{}`", path[..=depth].join("::")));
        }
    }
    let body = text(&file);
    let defined = MACRO_MODULES.contains(last)
        || body.contains(&format!("fn {last}("))
        || body.contains(&format!("mod {last}"))
        || dir.join(format!("{last}.rs")).is_file()
        || dir.join(last).join("mod.rs").is_file();
    (!defined).then(|| format!("`{}` has no test or module `{last}`", path.join("::")))
}

#[test]
fn every_test_filter_the_docs_show_finds_a_test() {
    let (mut problems, mut checked) = (Vec::new(), 0);
    for (file, text) in markdown() {
        for (number, line) in text.lines().enumerate() {
            for filter in it_filters(line) {
                checked += 1;
                if let Some(problem) = filter_problem(filter) {
                    let at = format!("{}:{}", file.display(), number + 1);
                    problems.push(format!("{at}: `{filter}`: {problem}"));
                }
            }
        }
    }
    assert!(checked >= 2, "{checked} filters: is the reader broken?");
    report("test filters in the docs that find no test", &problems);
}

#[test]
fn filters_are_read_and_judged() {
    let line = "(`cargo test -p koe-shared --test it api_calls::post::x`, --test it -- d::, <f>)";
    assert_eq!(it_filters(line), ["api_calls::post::x"]);
    assert_eq!(filter_problem("api_calls"), None);
    let post = "a_post_while_claimed_is_409_reservation_exists";
    assert_eq!(filter_problem(&format!("api_calls::post::{post}")), None);
    assert!(filter_problem(&format!("api_calls::{post}")).is_some());
    assert_eq!(filter_problem("store_contract::devices::memory"), None);
    assert!(filter_problem("no_such_suite").is_some());
}
