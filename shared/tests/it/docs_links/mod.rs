//! The docs hold together: README.md is a front page of at most 250 lines that links every page
//! of `docs/`; every relative link in README.md and `docs/*.md` names a file that exists, and
//! every `#anchor` (in the same file or in `file.md#anchor`) a heading of that file, by GitHub's
//! slugs, or an `<a id>` in it; every page of `docs/` opens with a `# Title` line, a blank line
//! and a plain summary paragraph. Links in fenced code blocks and inline code are not links, and
//! absolute URLs (http, https, mailto) are not checked.

mod cited_sections;
mod markdown;
mod pages;
mod parts;

use std::path::{Path, PathBuf};

use koe_testkit::template::repo_root;

pub(super) const README_MAX_LINES: usize = 250;

/// The markdown files these tests cover, relative to the repository root.
pub(super) fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md")];
    files.extend(docs_pages());
    files
}

/// `docs/*.md`, sorted.
pub(super) fn docs_pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(repo_root().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".md"))
        .map(|name| Path::new("docs").join(name))
        .collect();
    pages.sort();
    pages
}

pub(super) fn read(file: &Path) -> String {
    std::fs::read_to_string(repo_root().join(file))
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}
