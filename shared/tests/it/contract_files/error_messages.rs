//! Every error message the code can answer is an example in `openapi.yaml` under its status, with
//! its code, and every example is one it answers: read off the sources (`ApiError::new(
//! ErrorCode::X, "...")`, `format!` placeholders matching any text, `ApiError::unavailable`,
//! the provider's code-and-message table, and the 400s' `{field} {problem}` of `Invalid::new`
//! and `ApiError::invalid`, a field not written as a literal matching any), so a message added
//! or reworded without its example fails here. A construction this test cannot read fails too,
//! so none slips past it.

use std::collections::BTreeMap;
use std::path::Path;

use koe::platform::error::ErrorCode;
use koe_testkit::template::{load_yaml, repo_root};
use serde_norway::Value;

/// One message the code answers: its code, where it is, and its text split at its `format!`
/// placeholders (one piece: a fixed text).
#[derive(Debug)]
pub(super) struct Message {
    pub(super) code: ErrorCode,
    pub(super) at: String,
    pub(super) pieces: Vec<String>,
}

impl Message {
    pub(super) fn matches(&self, text: &str) -> bool {
        let (first, rest) = self.pieces.split_first().expect("a piece");
        let Some(mut left) = text.strip_prefix(first.as_str()) else {
            return false;
        };
        let Some((last, middle)) = rest.split_last() else {
            return left.is_empty();
        };
        // Each placeholder stands for at least one character.
        for piece in middle {
            let skip = left.chars().next().map_or(0, char::len_utf8);
            match left.get(skip..).and_then(|l| l.find(piece.as_str())) {
                Some(at) if skip > 0 => left = &left[skip + at + piece.len()..],
                _ => return false,
            }
        }
        left.len() > last.len() && left.ends_with(last.as_str())
    }
}

fn code_named(variant: &str) -> Option<ErrorCode> {
    let screaming: String = variant
        .chars()
        .enumerate()
        .flat_map(|(i, c)| {
            let sep = (i > 0 && c.is_ascii_uppercase()).then_some('_');
            sep.into_iter()
                .chain(std::iter::once(c.to_ascii_uppercase()))
        })
        .collect();
    ErrorCode::ALL
        .iter()
        .copied()
        .find(|c| c.as_str() == screaming)
}

/// The Rust string literal at the start of `text` (after `format!(` if that comes first), as
/// its pieces between `{...}` placeholders; `None` if `text` does not start with one.
fn literal(text: &str) -> Option<Vec<String>> {
    let text = text.trim_start();
    let text = match text.strip_prefix("format!(") {
        Some(rest) => rest.trim_start(),
        None => text,
    };
    let mut chars = text.strip_prefix('"')?.chars();
    let mut value = String::new();
    loop {
        match chars.next()? {
            '"' => break,
            '\\' => match chars.next()? {
                // A line continuation: the newline and the next line's indent are dropped.
                '\n' => {
                    let rest: String = chars.clone().collect();
                    let trimmed = rest.trim_start();
                    chars = text[text.len() - trimmed.len()..].chars();
                }
                'n' => value.push('\n'),
                other => value.push(other),
            },
            c => value.push(c),
        }
    }
    let mut pieces = vec![String::new()];
    let mut rest = value.as_str();
    while let Some(open) = rest.find('{') {
        pieces.last_mut().unwrap().push_str(&rest[..open]);
        let close = rest[open..].find('}').expect("a closed placeholder") + open;
        pieces.push(String::new());
        rest = &rest[close + 1..];
    }
    pieces.last_mut().unwrap().push_str(rest);
    Some(pieces)
}

/// How `ApiError::invalid` joins a field and its problem.
const INVALID_FORMAT: &str = "format!(\"{field} {problem}\")";

fn rust_files(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// Every message the sources can answer (`INVALID_REQUEST`'s as `{field} {problem}`, see
/// [`invalid_messages`]), or `Err` naming each
/// construction of an `ApiError` whose message this test cannot read.
pub(super) fn answered() -> Result<Vec<Message>, Vec<String>> {
    let root = repo_root();
    let mut files = Vec::new();
    for dir in ["shared/src", "koe-local/src", "functions/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    let (mut found, mut unread) = (Vec::new(), Vec::new());
    for path in files {
        let source = std::fs::read_to_string(&path).unwrap();
        // Unit tests build errors of their own.
        let source = source.split("#[cfg(test)]\nmod tests").next().unwrap();
        let name = path.strip_prefix(&root).unwrap().display().to_string();
        let line = |at: usize| format!("{name}:{}", source[..at].lines().count());
        // `ErrorCode::X, "..."` (a call's arguments, or the provider table's tuples).
        for (at, _) in source.match_indices("ErrorCode::") {
            let rest = &source[at + "ErrorCode::".len()..];
            let end = rest
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len());
            let Some(code) = code_named(&rest[..end]) else {
                continue;
            };
            let after = rest[end..].trim_start();
            let Some(argument) = after.strip_prefix(',') else {
                continue; // the enum, its lists and matches
            };
            // `ApiError::invalid`'s own `{field} {problem}`: its messages are read below.
            if argument.trim_start().starts_with(INVALID_FORMAT) {
                continue;
            }
            if let Some(pieces) = literal(argument) {
                found.push(Message {
                    code,
                    at: line(at),
                    pieces,
                });
            }
        }
        // Every construction: a code then a literal, or one of the forwarding ones.
        for (at, _) in source.match_indices("ApiError::new(") {
            let args = source[at + "ApiError::new(".len()..].trim_start();
            let readable = args
                .split_once(',')
                .and_then(|(code, message)| {
                    let code = code.rsplit("::").next()?;
                    code_named(code).map(|c| (c, message))
                })
                .is_some_and(|(_, message)| literal(message).is_some());
            // error.rs: `invalid` (400) and `unavailable` (its callers are read below);
            // model/mod.rs: the provider table's `(code, message)` (read above).
            let invalid = format!("ErrorCode::InvalidRequest, {INVALID_FORMAT}");
            let forwards = [
                invalid.as_str(),
                "ErrorCode::ServiceUnavailable, message)",
                "code, message)",
            ]
            .iter()
            .any(|f| args.starts_with(f));
            if !readable && !forwards {
                unread.push(line(at));
            }
        }
        for (at, _) in source.match_indices("ApiError::unavailable(") {
            let args = &source[at + "ApiError::unavailable(".len()..];
            match literal(args) {
                Some(pieces) => found.push(Message {
                    code: ErrorCode::ServiceUnavailable,
                    at: line(at),
                    pieces,
                }),
                None => unread.push(line(at)),
            }
        }
    }
    invalid_messages(&root, &mut found, &mut unread);
    if unread.is_empty() {
        Ok(found)
    } else {
        Err(unread)
    }
}

/// The arguments of the call whose `(` ends just before `text`, split at its top-level commas
/// up to its closing `)` (commas and brackets inside string literals skipped).
fn arguments(text: &str) -> Vec<&str> {
    let (mut depth, mut start, mut args) = (0usize, 0usize, Vec::new());
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                while let Some((_, c)) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth > 0 => depth -= 1,
            ')' => {
                args.push(text[start..i].trim());
                break;
            }
            ',' if depth == 0 => {
                args.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    args.retain(|a| !a.is_empty()); // a trailing comma
    args
}

/// A 400 `INVALID_REQUEST` message, `"{field} {problem}"` (`ApiError::invalid`,
/// `From<Invalid>`): a field named by a literal is that text, any other field (`self.name(f)`,
/// `message.name("role")`, a step's index) a placeholder.
fn invalid_message(at: String, field: &str, problem: Vec<String>) -> Message {
    let mut pieces = literal(field).unwrap_or_else(|| vec![String::new(), String::new()]);
    let mut problem = problem.into_iter();
    let last = pieces.last_mut().unwrap();
    last.push(' ');
    last.push_str(&problem.next().expect("a piece"));
    pieces.extend(problem);
    Message {
        code: ErrorCode::InvalidRequest,
        at,
        pieces,
    }
}

/// Problems passed on by name rather than written at the call (file, argument); their texts are
/// read where they are made, below.
const FORWARDED_PROBLEMS: &[(&str, &str)] = &[
    ("shared/src/platform/error.rs", "e.problem"), // From<Invalid>: the ones read here
    ("shared/src/domain/fields.rs", "rule"),       // optional_as's callers, check_length's
    ("shared/src/agent/handler.rs", "reason"),     // Refusal::field_and_reason
];

/// The text of `source` from `start` to the end of its block (a line that is `end`).
fn body<'a>(source: &'a str, start: &str, end: &str) -> Option<(usize, &'a str)> {
    let at = source.find(start)?;
    let len = source[at..].find(end)?;
    Some((at, &source[at..at + len]))
}

/// Every 400 `INVALID_REQUEST` message the sources make field by field: each
/// `Invalid::new(field, problem)` and `ApiError::invalid(field, problem)` with a literal (or
/// `format!`) problem, and the problems forwarded by name ([`FORWARDED_PROBLEMS`]) where they
/// are written. A construction read no way here is `unread`.
fn invalid_messages(root: &Path, found: &mut Vec<Message>, unread: &mut Vec<String>) {
    let mut files = Vec::new();
    for dir in ["shared/src", "koe-local/src", "functions/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    for path in files {
        let source = std::fs::read_to_string(&path).unwrap();
        let source = source.split("#[cfg(test)]\nmod tests").next().unwrap();
        let name = path.strip_prefix(root).unwrap().display().to_string();
        let line = |at: usize| format!("{name}:{}", source[..at].lines().count());
        for call in ["Invalid::new(", "ApiError::invalid("] {
            for (at, _) in source.match_indices(call) {
                match arguments(&source[at + call.len()..])[..] {
                    // The agent's own `Invalid`: a model's output refused (a 500), no 400.
                    [_] if call == "Invalid::new(" && name.starts_with("shared/src/agent/") => {}
                    [field, problem] => match literal(problem) {
                        Some(problem) => found.push(invalid_message(line(at), field, problem)),
                        None if FORWARDED_PROBLEMS.contains(&(name.as_str(), problem)) => {}
                        None => unread.push(line(at)),
                    },
                    _ => unread.push(line(at)),
                }
            }
        }
        let forwarded =
            |found: &mut Vec<Message>, unread: &mut Vec<String>, at, field, problem| match literal(
                problem,
            ) {
                Some(problem) => found.push(invalid_message(line(at), field, problem)),
                None => unread.push(line(at)),
            };
        match name.as_str() {
            "shared/src/domain/fields.rs" => {
                let calls: Vec<_> = source.match_indices("optional_as(").collect();
                for (at, _) in &calls {
                    match arguments(&source[at + "optional_as(".len()..])[..] {
                        [field, _, rule] => forwarded(found, unread, *at, field, rule),
                        _ => unread.push(line(*at)),
                    }
                }
                let Some((start, check)) = body(source, "pub fn check_length(", "\n}\n") else {
                    unread.push(format!("{name}: check_length"));
                    continue;
                };
                let rules: Vec<_> = check.match_indices("format!(").collect();
                for (at, _) in &rules {
                    forwarded(found, unread, start + at, "name", &check[*at..]);
                }
                if calls.is_empty() || rules.is_empty() {
                    unread.push(format!("{name}: optional_as's or check_length's rules"));
                }
            }
            "shared/src/agent/binding.rs" => {
                let Some((start, arms)) = body(source, "pub fn field_and_reason(", "\n    }\n")
                else {
                    unread.push(format!("{name}: field_and_reason"));
                    continue;
                };
                let tuples: Vec<_> = arms.match_indices("=> (").collect();
                for (at, _) in &tuples {
                    match arguments(&arms[at + "=> (".len()..])[..] {
                        [field, reason] => forwarded(found, unread, start + at, field, reason),
                        _ => unread.push(line(start + at)),
                    }
                }
                if tuples.is_empty() {
                    unread.push(format!("{name}: field_and_reason's arms"));
                }
            }
            _ => {}
        }
    }
}

/// (status, code, message, where) of every `Error` example in openapi.yaml's responses: under
/// each operation's statuses, and the router's responses (`x-status`) that no operation lists.
pub(super) fn examples(openapi: &Value) -> Vec<(u16, String, String, String)> {
    let mut found = Vec::new();
    let mut add = |status: u16, response: &Value, at: String| {
        let response = match response["$ref"].as_str() {
            Some(r) => &openapi["components"]["responses"][r.rsplit('/').next().unwrap()],
            None => response,
        };
        let content = response["content"]["application/json"]["examples"].as_mapping();
        for (name, example) in content.into_iter().flatten() {
            let value = &example["value"];
            if let (Some(code), Some(message)) = (value["code"].as_str(), value["message"].as_str())
            {
                assert_eq!(
                    value["error"].as_str(),
                    Some(message),
                    "{at} {name:?}: `error` is `message`"
                );
                found.push((status, code.to_owned(), message.to_owned(), at.clone()));
            }
        }
    };
    for (path, item) in openapi["paths"].as_mapping().unwrap() {
        for (method, operation) in item.as_mapping().unwrap() {
            for (status, response) in operation["responses"].as_mapping().into_iter().flatten() {
                let status = status.as_str().unwrap();
                let at = format!(
                    "{} {} {status}",
                    method.as_str().unwrap(),
                    path.as_str().unwrap()
                );
                add(status.parse().unwrap(), response, at);
            }
        }
    }
    for (name, response) in openapi["components"]["responses"].as_mapping().unwrap() {
        if let Some(status) = response["x-status"].as_u64() {
            add(
                status as u16,
                response,
                format!("components.responses.{}", name.as_str().unwrap()),
            );
        }
    }
    found
}

#[test]
fn every_error_message_the_code_answers_is_an_example_under_its_status() {
    let messages = answered().unwrap_or_else(|unread| {
        panic!("ApiError messages this test cannot read (a literal, or format!): {unread:?}")
    });
    // The read found the messages it must: one of each kind.
    for code in [
        ErrorCode::Unauthorized,
        ErrorCode::TooLate,
        ErrorCode::ProviderTimeout,
        ErrorCode::MethodNotAllowed,
        ErrorCode::ServiceUnavailable,
    ] {
        assert!(
            messages.iter().any(|m| m.code == code),
            "no {} message read",
            code.as_str()
        );
    }
    let examples = examples(&load_yaml("openapi.yaml"));
    let mut missing = Vec::new();
    for message in &messages {
        let documented = examples.iter().any(|(status, code, text, _)| {
            *status == message.code.status().as_u16()
                && code == message.code.as_str()
                && message.matches(text)
        });
        if !documented {
            missing.push(format!(
                "{} {} {:?} ({})",
                message.code.status().as_u16(),
                message.code.as_str(),
                message.pieces.join("{}"),
                message.at
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "messages with no example in openapi.yaml under their status: {missing:#?}"
    );
    // And every example is under its code's status.
    let statuses: BTreeMap<&str, u16> = ErrorCode::ALL
        .iter()
        .map(|c| (c.as_str(), c.status().as_u16()))
        .collect();
    for (status, code, _, at) in &examples {
        assert_eq!(
            statuses.get(code.as_str()),
            Some(status),
            "{at}: an example of {code}"
        );
    }
}

#[test]
fn every_invalid_request_example_is_a_message_the_code_answers() {
    let messages = answered().unwrap_or_else(|unread| panic!("unread: {unread:?}"));
    let invalid: Vec<_> = messages
        .iter()
        .filter(|m| m.code == ErrorCode::InvalidRequest)
        .collect();
    // The read found the field-by-field ones: a literal field, a named one, forwarded ones.
    for (example, at) in [
        ("deviceId is required (query parameter)", "calls/handler.rs"),
        (
            "messages[2].role must be one of system, user, assistant",
            "domain/chat.rs",
        ),
        ("callerName must be 1 to 64 characters", "domain/fields.rs"),
        ("model must be a string", "domain/fields.rs"),
        (
            "results[0].stepId belongs to another plan than results[0] or repeats a step",
            "binding.rs",
        ),
    ] {
        assert!(
            invalid
                .iter()
                .any(|m| m.at.contains(at) && m.matches(example)),
            "no message of {at} read for {example:?}"
        );
    }
    let mut unknown = Vec::new();
    for (_, code, text, at) in examples(&load_yaml("openapi.yaml")) {
        if code == "INVALID_REQUEST" && !invalid.iter().any(|m| m.matches(&text)) {
            unknown.push(format!("{at}: {text:?}"));
        }
    }
    assert!(
        unknown.is_empty(),
        "INVALID_REQUEST examples no code answers: {unknown:#?}"
    );
}

#[test]
fn messages_match_their_examples_placeholders_and_all() {
    let fixed = Message {
        code: ErrorCode::NotFound,
        at: String::new(),
        pieces: literal("\"no such route\"").unwrap(),
    };
    assert!(fixed.matches("no such route"));
    assert!(!fixed.matches("no such route!"));
    let formatted = literal(
        "format!(\n \"the reservation is already {}: it can \\\n   no longer be cancelled\", s)",
    )
    .unwrap();
    assert_eq!(
        formatted,
        [
            "the reservation is already ",
            ": it can no longer be cancelled"
        ]
    );
    let too_late = Message {
        code: ErrorCode::TooLate,
        at: String::new(),
        pieces: formatted,
    };
    assert!(too_late.matches("the reservation is already sent: it can no longer be cancelled"));
    assert!(!too_late.matches("the reservation is already : it can no longer be cancelled"));
    assert!(!too_late.matches("the reservation is already sent"));
    assert_eq!(literal("message)"), None);
}
