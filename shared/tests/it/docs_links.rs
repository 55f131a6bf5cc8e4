//! The docs hold together: README.md is a front page of at most 250 lines that links every page
//! of `docs/`; every relative link in README.md and `docs/*.md` names a file that exists, and
//! every `#anchor` (in the same file or in `file.md#anchor`) a heading of that file, by GitHub's
//! slugs, or an `<a id>` in it; every page of `docs/` opens with a `# Title` line, a blank line
//! and a plain summary paragraph. Links in fenced code blocks and inline code are not links, and
//! absolute URLs (http, https, mailto) are not checked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use koe_testkit::template::repo_root;

const README_MAX_LINES: usize = 250;

/// The markdown files these tests cover, relative to the repository root.
fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md")];
    files.extend(docs_pages());
    files
}

/// `docs/*.md`, sorted.
fn docs_pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(repo_root().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".md"))
        .map(|name| Path::new("docs").join(name))
        .collect();
    pages.sort();
    pages
}

fn read(file: &Path) -> String {
    std::fs::read_to_string(repo_root().join(file))
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// The file's lines with those of fenced code blocks (and the fences) blanked, so line numbers
/// stay the same.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut fence: Option<&str> = None;
    text.lines()
        .map(|line| {
            let trimmed = line.trim_start();
            let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
            match (fence, marker) {
                (None, Some(m)) if line.len() - trimmed.len() < 4 => {
                    fence = Some(m);
                    ""
                }
                (Some(open), Some(m)) if open == m && trimmed.trim_end() == m => {
                    fence = None;
                    ""
                }
                (Some(_), _) => "",
                (None, _) => line,
            }
        })
        .collect()
}

/// `text` with its inline code spans blanked: a run of backticks up to the next run of the same
/// length, within a paragraph (a span may cross a line break, not a blank line). Line breaks are
/// kept.
fn without_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let run_at = |i: usize| chars[i..].iter().take_while(|c| **c == '`').count();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = run_at(i);
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '\n' && chars.get(j + 1) == Some(&'\n') {
                break;
            }
            if chars[j] == '`' {
                let other = run_at(j);
                if other == run {
                    close = Some(j);
                    break;
                }
                j += other;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                for c in &chars[i..end + run] {
                    out.push(if *c == '\n' { '\n' } else { ' ' });
                }
                i = end + run;
            }
            None => {
                // No closing run: the backticks are literal.
                for _ in 0..run {
                    out.push('`');
                }
                i += run;
            }
        }
    }
    out
}

/// GitHub's anchor for a heading's text (github-slugger): the rendered text lowercased, every
/// character dropped that is not a letter, a digit, `-`, `_` or a space, and spaces made `-`.
fn slug(heading: &str) -> String {
    plain_text(heading)
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A heading's text as GitHub renders it: links as their text, no code, emphasis or HTML marks.
fn plain_text(markdown: &str) -> String {
    let mut text = String::new();
    let mut rest = markdown;
    while let Some(at) = rest.find("](") {
        let Some(end) = rest[at..].find(')') else {
            break;
        };
        text.push_str(&rest[..at]);
        rest = &rest[at + end + 1..];
    }
    text.push_str(rest);
    let mut plain = String::new();
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            '`' | '*' | '[' | ']' => {}
            _ if in_tag => {}
            _ => plain.push(c),
        }
    }
    plain.trim().to_owned()
}

/// The text of an ATX heading line (`## Title ##` → `Title`), or `None`.
fn heading(line: &str) -> Option<&str> {
    let hashes = line.chars().take_while(|c| *c == '#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &line[hashes..];
    if !rest.is_empty() && !rest.starts_with(' ') {
        return None;
    }
    Some(rest.trim().trim_end_matches('#').trim())
}

/// Every anchor a file offers: its headings' slugs (a repeated slug gets `-1`, `-2`, ...) and
/// the `id`/`name` of its `<a>` tags.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose_lines(text) {
        if let Some(title) = heading(line) {
            let base = slug(title);
            let count = seen.entry(base.clone()).or_insert(0);
            out.insert(if *count == 0 {
                base.clone()
            } else {
                format!("{base}-{count}")
            });
            *count += 1;
        }
        for attr in ["id=\"", "name=\""] {
            let mut rest = line;
            while let Some(at) = rest.find("<a ") {
                rest = &rest[at + 3..];
                let tag = &rest[..rest.find('>').unwrap_or(rest.len())];
                if let Some(start) = tag.find(attr) {
                    let value = &tag[start + attr.len()..];
                    out.insert(value[..value.find('"').unwrap_or(value.len())].to_owned());
                }
            }
        }
    }
    out
}

/// The targets of a file's inline links and images (`[text](target)`, `![alt](target)`), with
/// their line numbers, outside code; a title after the target is dropped.
fn links(text: &str) -> Vec<(usize, String)> {
    let prose = without_code_spans(&prose_lines(text).join("\n"));
    let mut out = Vec::new();
    for (number, line) in prose.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = rest[..end].trim();
            let target = target.split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            out.push((number + 1, target.to_owned()));
            rest = &rest[end..];
        }
    }
    out
}

fn is_absolute_url(target: &str) -> bool {
    ["http://", "https://", "mailto:"]
        .iter()
        .any(|scheme| target.starts_with(scheme))
}

/// `target` (relative to `from`'s folder) as a path from the repository root, `..` resolved.
fn resolve(from: &Path, target: &str) -> PathBuf {
    let mut path = PathBuf::new();
    for part in from
        .parent()
        .unwrap_or(Path::new(""))
        .join(target)
        .components()
    {
        match part {
            Component::ParentDir => {
                path.pop();
            }
            Component::CurDir => {}
            other => path.push(other),
        }
    }
    path
}

/// What is wrong with one file's links: missing files, anchors no heading makes.
fn broken_links(
    file: &Path,
    text: &str,
    anchors_of: &mut impl FnMut(&Path) -> BTreeSet<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (line, target) in links(text) {
        if target.is_empty() || is_absolute_url(&target) {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target.as_str(), None),
        };
        let linked = if path.is_empty() {
            file.to_path_buf()
        } else {
            resolve(file, path)
        };
        if !path.is_empty() && !repo_root().join(&linked).exists() {
            problems.push(format!(
                "{}:{line}: {target}: no file {}",
                file.display(),
                linked.display()
            ));
            continue;
        }
        if let Some(anchor) = anchor
            && linked.extension().is_some_and(|e| e == "md")
            && !anchors_of(&linked).contains(anchor)
        {
            problems.push(format!(
                "{}:{line}: {target}: {} has no heading #{anchor}",
                file.display(),
                linked.display()
            ));
        }
    }
    problems
}

/// What is wrong with a page's opening: a `# Title` line, a blank line, a plain paragraph.
fn opening_problem(text: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let title = lines.first().copied().unwrap_or("");
    if !title.starts_with("# ") || title[2..].trim().is_empty() {
        return Some(format!("the first line is not a `# Title`: {title:?}"));
    }
    if lines.get(1).is_none_or(|l| !l.trim().is_empty()) {
        return Some("no blank line after the title".into());
    }
    let summary = lines.get(2).copied().unwrap_or("");
    let numbered = summary
        .split_once(". ")
        .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
    let not_prose = summary.trim().is_empty()
        || summary.starts_with([' ', '\t', '#', '-', '*', '+', '>', '|', '<', '!'])
        || summary.starts_with("```")
        || summary.starts_with("~~~")
        || numbered;
    not_prose.then(|| format!("the title is not followed by a summary paragraph: {summary:?}"))
}

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

// The checks' own parts, so that a check that passes is one that could fail.

#[test]
fn slugs_follow_github() {
    let cases = [
        ("Round 2 is bound to round 1", "round-2-is-bound-to-round-1"),
        ("POST /internal/dispatch", "post-internaldispatch"),
        (
            "Cost (DynamoDB, per run, i.e. per minute)",
            "cost-dynamodb-per-run-ie-per-minute",
        ),
        (
            "Streamed chat: size of the functions and time to the first sentence",
            "streamed-chat-size-of-the-functions-and-time-to-the-first-sentence",
        ),
        ("`PUSH_SENDER` and *friends*", "push_sender-and-friends"),
        ("See [the table](#x) below", "see-the-table-below"),
        ("What fails open -- and why?", "what-fails-open----and-why"),
        ("日本語の見出し。", "日本語の見出し"),
        ("Émotions in Koe", "émotions-in-koe"),
    ];
    for (heading, expected) in cases {
        assert_eq!(slug(heading), expected, "{heading}");
    }
}

#[test]
fn repeated_headings_and_html_anchors_are_anchors_and_code_is_not() {
    let text = "# A\n\n## A\n\n```sh\n# A\n# not a heading\n```\n\n## A ##\n\n\
                - <a id=\"gateway-answers\"></a>**Gateway answers**\n";
    let found = anchors(text);
    let expected: BTreeSet<String> = ["a", "a-1", "a-2", "gateway-answers"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(found, expected);
}

#[test]
fn links_skip_code_and_keep_their_line() {
    let text = "# T\n\nSee [a](a.md#b) and `[no](c.md)`, ![img](d.png \"title\").\n\n\
                ```sh\ncurl [x](y.md)\n```\nA `span\ncrossing [no](e.md)` line, then [f](#g).\n";
    let found = links(text);
    assert_eq!(
        found,
        vec![
            (3, "a.md#b".to_owned()),
            (3, "d.png".to_owned()),
            (9, "#g".to_owned()),
        ]
    );
}

#[test]
fn broken_links_are_reported() {
    let file = Path::new("docs/example.md");
    let text = "# T\n\nSummary.\n\n## Here\n\n[ok](#here), [gone](#nowhere), [file](missing.md), \
                [readme](../README.md#prerequisites), [bad](../README.md#nope), \
                [web](https://example.com/x.md#y)\n";
    let mut anchors_of = |path: &Path| -> BTreeSet<String> {
        if path == Path::new("README.md") {
            BTreeSet::from(["prerequisites".to_owned()])
        } else {
            assert_eq!(path, file, "{}", path.display());
            anchors(text)
        }
    };
    let problems = broken_links(file, text, &mut anchors_of);
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(
        problems[0].contains("has no heading #nowhere"),
        "{problems:?}"
    );
    assert!(
        problems[1].contains("no file docs/missing.md"),
        "{problems:?}"
    );
    assert!(
        problems[2].contains("README.md has no heading #nope"),
        "{problems:?}"
    );
}

#[test]
fn an_opening_without_a_summary_paragraph_is_refused() {
    assert_eq!(opening_problem("# Title\n\nWhat this page holds.\n"), None);
    assert_eq!(opening_problem("# Title\n\n`POST /x` answers.\n"), None);
    for bad in [
        "Title\n\nText.\n",
        "# Title\nText.\n",
        "# Title\n\n## Section\n",
        "# Title\n\n- a list\n",
        "# Title\n\n1. a list\n",
        "# Title\n\n```sh\ncode\n```\n",
        "# Title\n\n| a | table |\n",
        "# Title\n",
    ] {
        assert!(opening_problem(bad).is_some(), "{bad:?}");
    }
}

#[test]
fn relative_paths_resolve_from_the_linking_file() {
    assert_eq!(
        resolve(Path::new("docs/a.md"), "../README.md"),
        PathBuf::from("README.md")
    );
    assert_eq!(
        resolve(Path::new("README.md"), "docs/a.md"),
        PathBuf::from("docs/a.md")
    );
    assert_eq!(
        resolve(Path::new("docs/a.md"), "./b.md"),
        PathBuf::from("docs/b.md")
    );
}

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
        if file.ends_with("docs_links.rs") {
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
