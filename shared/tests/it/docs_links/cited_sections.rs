//! Every `docs/page.md, "Heading"` a repository file cites names a heading of that page.

use std::path::{Path, PathBuf};

use koe_testkit::template::repo_root;

use super::markdown::{heading, plain_text, prose_lines};

/// The sections a repository file cites as `docs/page.md, "Heading"` (or `docs/page.md
/// ("Heading")`, `docs/page.md "Heading"`), with the file and line: (citing place, page, heading).
/// A section is a heading or a list item's bold label (`- **Label**: ...`).
fn cited_sections(file: &str, text: &str) -> Vec<(String, PathBuf, String)> {
    let mut out = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("docs/") {
            rest = &rest[at..];
            let name_len = rest[5..]
                .find(|c: char| !(c.is_ascii_lowercase() || c == '-' || c == '.'))
                .map_or(rest.len() - 5, |n| n);
            let page = &rest[..5 + name_len];
            rest = &rest[5 + name_len..];
            if !page.ends_with(".md") {
                continue;
            }
            let gap = rest
                .find('"')
                .filter(|&g| g <= 3 && rest[..g].chars().all(|c| matches!(c, ',' | ' ' | '(')));
            if let Some(gap) = gap {
                let quoted = &rest[gap + 1..];
                if let Some(end) = quoted.find('"') {
                    let place = format!("{file}:{}", number + 1);
                    out.push((place, PathBuf::from(page), quoted[..end].to_owned()));
                }
            }
        }
    }
    out
}

/// The repository's source and script files (not the docs: they link by anchor).
fn repository_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(repo_root().join(dir)).unwrap() {
        let entry = entry.unwrap();
        let rel = dir.join(entry.file_name());
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().unwrap().is_dir() {
            if !name.starts_with('.')
                && !matches!(name.as_str(), "target" | "node_modules" | "docs")
            {
                repository_sources(&rel, out);
            }
        } else if ["rs", "sh", "yaml", "py", "toml"]
            .iter()
            .any(|ext| name.ends_with(&format!(".{ext}")))
        {
            out.push(rel);
        }
    }
}

#[test]
fn every_section_the_code_cites_is_a_heading_of_its_page() {
    let mut files = Vec::new();
    repository_sources(Path::new(""), &mut files);
    let mut cited = 0;
    let mut problems = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(repo_root().join(&file)).unwrap_or_default();
        if file.starts_with("shared/tests/it/docs_links") {
            continue; // its own examples
        }
        for (place, page, section) in cited_sections(&file.display().to_string(), &text) {
            cited += 1;
            let Ok(doc) = std::fs::read_to_string(repo_root().join(&page)) else {
                problems.push(format!("{place}: {} does not exist", page.display()));
                continue;
            };
            let lines = prose_lines(&doc);
            let found = lines
                .iter()
                .filter_map(|l| heading(l))
                .any(|t| plain_text(t) == section)
                || lines
                    .iter()
                    .any(|l| l.starts_with(&format!("- **{section}**")));
            if !found {
                problems.push(format!(
                    "{place}: {} has no heading \"{section}\"",
                    page.display()
                ));
            }
        }
    }
    assert!(
        cited > 20,
        "only {cited} cited sections found: is the parser broken?"
    );
    assert!(
        problems.is_empty(),
        "cited sections that are not there:\n{}",
        problems.join("\n")
    );
}

#[test]
fn cited_sections_are_read_in_each_form() {
    let text = "a (docs/x.md, \"One\") b docs/y.md (\"Two\") c docs/z.md \"Three\" d docs/w.md said \"no\"";
    let found: Vec<(PathBuf, String)> = cited_sections("f.rs", text)
        .into_iter()
        .map(|(place, page, section)| {
            assert_eq!(place, "f.rs:1");
            (page, section)
        })
        .collect();
    assert_eq!(
        found,
        [
            ("docs/x.md", "One"),
            ("docs/y.md", "Two"),
            ("docs/z.md", "Three")
        ]
        .map(|(p, s)| (PathBuf::from(p), s.to_owned()))
    );
}
