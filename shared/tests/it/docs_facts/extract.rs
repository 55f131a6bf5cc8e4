//! The docs-facts test's readers of markdown and Rust text, each tested on small strings.

/// The inline code spans of markdown text (fenced blocks skipped), with the line each starts on.
/// A span may cross a line break, not a blank line.
pub fn code_spans(text: &str) -> Vec<(usize, String)> {
    let mut spans = Vec::new();
    let mut paragraph: Vec<&str> = Vec::new();
    let mut first_line = 0;
    let mut in_fence = false;
    let mut flush = |paragraph: &mut Vec<&str>, first_line: usize| {
        let joined = paragraph.join("\n");
        let mut line = first_line;
        for (i, piece) in joined.split('`').enumerate() {
            if i % 2 == 1 && !piece.is_empty() {
                spans.push((line, piece.to_owned()));
            }
            line += piece.matches('\n').count();
        }
        paragraph.clear();
    };
    for (number, line) in text.lines().enumerate() {
        let fence = line.trim_start().starts_with("```") || line.trim_start().starts_with("~~~");
        if fence || in_fence || line.trim().is_empty() {
            flush(&mut paragraph, first_line);
            in_fence ^= fence;
            continue;
        }
        if paragraph.is_empty() {
            first_line = number + 1;
        }
        paragraph.push(line);
    }
    flush(&mut paragraph, first_line);
    spans
}

/// The doc comments (`//!`, `///`) of Rust source as markdown, other lines blank (so line
/// numbers stay).
pub fn doc_comments(source: &str) -> String {
    source
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            trimmed
                .strip_prefix("//!")
                .or_else(|| trimmed.strip_prefix("///"))
                .map_or("", |rest| rest.strip_prefix(' ').unwrap_or(rest))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// An UPPER_SNAKE word (`SERVICE_UNAVAILABLE`, `STORE=dynamodb` → `STORE`), or `None`.
pub fn upper_snake(span: &str) -> Option<&str> {
    let name = span.split('=').next().unwrap_or("");
    let shaped = name.len() >= 2
        && name.starts_with(|c: char| c.is_ascii_uppercase())
        && !name.ends_with('_')
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    shaped.then_some(name)
}

/// A repository path (`shared/src/x.rs`, `bench/run.sh:12`, `shared/tests/it/faults_*.rs`):
/// one word with a `/`, no URL, placeholder or variable, its `:line` dropped.
pub fn path_like(span: &str) -> Option<&str> {
    let path = span.split(':').next().unwrap_or("");
    let odd = |c: char| c.is_whitespace() || "<>${}=()'\"@".contains(c);
    let plain = path.contains('/')
        && !path.starts_with('/')
        && !path.contains("//")
        && !path.contains(odd)
        && path.starts_with(|c: char| c.is_ascii_lowercase() || c == '.');
    plain.then_some(path)
}

/// A Rust path's segments (`koe::push::pool::PushPool`, `dispatch::run()`,
/// `koe::app::lambda::http::run::<koe::chat::api::Chat>()` → `koe, lambda, http, run`),
/// when it starts with a lowercase name.
pub fn module_path(span: &str) -> Option<Vec<&str>> {
    let span = span.split("::<").next().unwrap_or("");
    let span = span.trim_end_matches("()").trim_end_matches('*');
    let segments: Vec<&str> = span.split("::").collect();
    let ident = |s: &str| {
        !s.is_empty()
            && !s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let shaped = segments.len() >= 2
        && segments.iter().all(|s| ident(s))
        && segments[0].starts_with(|c: char| c.is_ascii_lowercase());
    shaped.then_some(segments)
}

/// The packages a line's cargo command names with `-p NAME`, `-p=NAME` or `--package NAME`.
pub fn cargo_packages(line: &str) -> Vec<&str> {
    if !line.contains("cargo ") {
        return Vec::new();
    }
    let words: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || c == '`')
        .filter(|w| !w.is_empty())
        .collect();
    let mut packages = Vec::new();
    for (i, word) in words.iter().enumerate() {
        if let Some(name) = word
            .strip_prefix("-p=")
            .or_else(|| word.strip_prefix("--package="))
        {
            packages.push(name);
        } else if matches!(*word, "-p" | "--package")
            && let Some(name) = words.get(i + 1)
        {
            packages.push(*name);
        }
    }
    packages
}

/// The rows of a `| variable | used by | default | meaning |` table: the UPPER_SNAKE names of
/// the first cell and the default when the third cell opens with one in backticks.
pub fn default_rows(text: &str) -> Vec<(Vec<String>, Option<String>)> {
    text.lines()
        .filter(|line| line.starts_with("| `"))
        .filter_map(|line| {
            let cells: Vec<&str> = line.split(" | ").collect();
            let names: Vec<String> = cells[0]
                .split('`')
                .skip(1)
                .step_by(2)
                .filter_map(upper_snake)
                .map(str::to_owned)
                .collect();
            let default = cells.get(2)?.strip_prefix('`').map(|rest| {
                let end = rest.find('`').unwrap_or(rest.len());
                rest[..end].to_owned()
            });
            (!names.is_empty()).then_some((names, default))
        })
        .collect()
}

/// The literal a Rust call passes beside `name` (`int_or("NAME", 50, ...)` → `50`,
/// `string_or("NAME", "koe")` → `koe`), the first such call in `source`.
pub fn literal_default(source: &str, name: &str) -> Option<String> {
    let needle = format!("(\"{name}\", ");
    let rest = &source[source.find(&needle)? + needle.len()..];
    if let Some(quoted) = rest.strip_prefix('"') {
        return Some(quoted[..quoted.find('"')?].to_owned());
    }
    let literal: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .filter(|c| *c != '_')
        .collect();
    let is_literal =
        literal == "true" || literal == "false" || literal.chars().all(|c| c.is_ascii_digit());
    (!literal.is_empty() && is_literal).then_some(literal)
}

/// Source without its `#[cfg(test)]` part (the tests at the end of a file).
pub fn without_tests(source: &str) -> &str {
    source.split("#[cfg(test)]").next().unwrap_or(source)
}

/// The names of a source's `const` and `static` items.
pub fn constants(source: &str) -> Vec<&str> {
    source
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "const" || w[0] == "static")
        .map(|w| w[1])
        .filter(|name| upper_snake(name).is_some())
        .collect()
}

/// The UPPER_SNAKE string literals of Rust source (`"AGENT_DAILY_LIMIT"`).
pub fn string_literals(source: &str) -> Vec<&str> {
    source
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| upper_snake(s) == Some(*s))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_spans_skip_fences_and_keep_their_line() {
        let text = "# T\n\nSay `A_B` and\n`C` then `d\ne`.\n\n```sh\nx `NO` y\n```\n`LAST`\n";
        let spans = code_spans(text);
        let expected = [(3, "A_B"), (4, "C"), (4, "d\ne"), (10, "LAST")];
        let expected: Vec<(usize, String)> = expected
            .iter()
            .map(|(l, s)| (*l, (*s).to_owned()))
            .collect();
        assert_eq!(spans, expected);
    }

    #[test]
    fn doc_comments_keep_lines() {
        let source = "//! One `a`.\nuse x;\n/// Two\nfn f() {} // not `b`\n";
        assert_eq!(doc_comments(source), "One `a`.\n\nTwo\n");
    }

    #[test]
    fn upper_snake_words() {
        assert_eq!(
            upper_snake("SERVICE_UNAVAILABLE"),
            Some("SERVICE_UNAVAILABLE")
        );
        assert_eq!(upper_snake("STORE=dynamodb"), Some("STORE"));
        assert_eq!(upper_snake("NOW_2035"), Some("NOW_2035"));
        for not in [
            "Store",
            "_X",
            "X_",
            "A",
            "A B",
            "store",
            "POST /calls",
            "2XX",
        ] {
            assert_eq!(upper_snake(not), None, "{not}");
        }
    }

    #[test]
    fn paths_are_repository_words() {
        assert_eq!(path_like("shared/src/lib.rs:12"), Some("shared/src/lib.rs"));
        assert_eq!(path_like("bench/"), Some("bench/"));
        assert_eq!(
            path_like("shared/tests/it/faults_*.rs"),
            Some("shared/tests/it/faults_*.rs")
        );
        for not in [
            "/calls",
            "https://api.openai.com/v1",
            "<stack>/log-salt",
            "Koe/Api",
            "$KOE_CACHE_DIR/target",
            "POST /calls",
            "functions/src/bin/<binary>.rs",
            "lib.rs",
        ] {
            assert_eq!(path_like(not), None, "{not}");
        }
    }

    #[test]
    fn module_paths_are_lowercase_rooted() {
        assert_eq!(
            module_path("koe::push::pool::PushPool"),
            Some(vec!["koe", "push", "pool", "PushPool"])
        );
        assert_eq!(
            module_path("dispatch::run()"),
            Some(vec!["dispatch", "run"])
        );
        assert_eq!(
            module_path("koe::app::lambda::http::run::<koe::chat::api::Chat>()"),
            Some(vec!["koe", "app", "lambda", "http", "run"])
        );
        for not in ["Store::release_claim", "koe", "a::b c", "x::"] {
            assert_eq!(module_path(not), None, "{not}");
        }
    }

    #[test]
    fn cargo_packages_after_p() {
        assert_eq!(
            cargo_packages("run `cargo test -p koe-shared --test it` and -p x"),
            vec!["koe-shared", "x"]
        );
        assert_eq!(
            cargo_packages("cargo build --package=koe-local"),
            vec!["koe-local"]
        );
        assert_eq!(
            cargo_packages("cargo clippy --all-targets"),
            Vec::<&str>::new()
        );
        assert_eq!(cargo_packages("grep -p koe"), Vec::<&str>::new());
    }

    #[test]
    fn default_rows_read_names_and_backticked_defaults() {
        let text = "| variable | used by | default | meaning |\n| --- | --- | --- | --- |\n\
                    | `A_B` (*secret*) | x | `50` | y |\n| `C`, `D_E` | x | unset | y |\n\
                    | `<VAR>_X` | x | `1` | y |\n";
        assert_eq!(
            default_rows(text),
            vec![
                (vec!["A_B".to_owned()], Some("50".to_owned())),
                (vec!["D_E".to_owned()], None),
            ]
        );
    }

    #[test]
    fn literal_defaults_next_to_the_name() {
        let source = r#"a: addr("CHAT_ADDR", "127.0.0.1:3000")?, b: vars.bool_or("LOCAL", true)?,
                        c: vars.int_or("N", 5_000, 1..=9)?, d: vars.int_or("M", DEFAULT, 1..=9)"#;
        assert_eq!(
            literal_default(source, "CHAT_ADDR").as_deref(),
            Some("127.0.0.1:3000")
        );
        assert_eq!(literal_default(source, "LOCAL").as_deref(), Some("true"));
        assert_eq!(literal_default(source, "N").as_deref(), Some("5000"));
        assert_eq!(literal_default(source, "M"), None);
        assert_eq!(literal_default(source, "NONE"), None);
    }

    #[test]
    fn constants_and_literals_of_source() {
        let source = "pub const MAX_X: u32 = 3;\nstatic ONE_Y: &str = \"AN_ENV\";\nconst fn f() {}\n\
                      let s = \"lower\";\n#[cfg(test)]\nconst IN_TEST: u8 = 0;";
        assert_eq!(constants(without_tests(source)), vec!["MAX_X", "ONE_Y"]);
        assert_eq!(string_literals(source), vec!["AN_ENV"]);
    }
}
