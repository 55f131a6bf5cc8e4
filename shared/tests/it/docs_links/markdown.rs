//! Markdown as GitHub reads it: prose outside code, headings, slugs, anchors, links; what is broken.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use koe_testkit::template::repo_root;

/// The file's lines with those of fenced code blocks (and the fences) blanked, so line numbers
/// stay the same.
pub(super) fn prose_lines(text: &str) -> Vec<&str> {
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
pub(super) fn without_code_spans(text: &str) -> String {
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
pub(super) fn slug(heading: &str) -> String {
    plain_text(heading)
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A heading's text as GitHub renders it: links as their text, no code, emphasis or HTML marks.
pub(super) fn plain_text(markdown: &str) -> String {
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
pub(super) fn heading(line: &str) -> Option<&str> {
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
pub(super) fn anchors(text: &str) -> BTreeSet<String> {
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
pub(super) fn links(text: &str) -> Vec<(usize, String)> {
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

pub(super) fn is_absolute_url(target: &str) -> bool {
    ["http://", "https://", "mailto:"]
        .iter()
        .any(|scheme| target.starts_with(scheme))
}

/// `target` (relative to `from`'s folder) as a path from the repository root, `..` resolved.
pub(super) fn resolve(from: &Path, target: &str) -> PathBuf {
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
pub(super) fn broken_links(
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
pub(super) fn opening_problem(text: &str) -> Option<String> {
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
