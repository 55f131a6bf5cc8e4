//! The checks' own parts, so that a check that passes is one that could fail.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::markdown::{anchors, broken_links, links, opening_problem, resolve, slug};

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
