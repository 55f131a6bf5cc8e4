//! The docs as they are: the README's length and links, every link and anchor, each page's opening.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::markdown::{anchors, broken_links, is_absolute_url, links, opening_problem, resolve};
use super::{README_MAX_LINES, docs_pages, markdown_files, read};

#[test]
fn the_readme_is_a_front_page_of_at_most_250_lines() {
    let lines = read(Path::new("README.md")).lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines (at most {README_MAX_LINES}): move the detail into docs/"
    );
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut cache: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut anchors_of = |path: &Path| {
        cache
            .entry(path.to_path_buf())
            .or_insert_with(|| anchors(&read(path)))
            .clone()
    };
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = read(&file);
        checked += links(&text).len();
        problems.extend(broken_links(&file, &text, &mut anchors_of));
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser broken?"
    );
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_doc_opens_with_a_title_and_a_summary_paragraph() {
    let problems: Vec<String> = docs_pages()
        .iter()
        .filter_map(|page| opening_problem(&read(page)).map(|p| format!("{}: {p}", page.display())))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_readme_links_every_doc() {
    let readme = Path::new("README.md");
    let linked: BTreeSet<PathBuf> = links(&read(readme))
        .into_iter()
        .filter(|(_, target)| !is_absolute_url(target))
        .map(|(_, target)| resolve(readme, target.split('#').next().unwrap()))
        .collect();
    let missing: Vec<String> = docs_pages()
        .into_iter()
        .filter(|page| !linked.contains(page))
        .map(|page| page.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "README.md's docs map does not link: {}",
        missing.join(", ")
    );
}
