//! docs/local.md's fixture table (section "Fixtures and local invocation"): a row per `events/`
//! fixture with its function and what it answers.

use std::collections::BTreeMap;

use crate::template::repo_root;

/// The page that documents the fixtures and the commands that invoke them.
pub const LOCAL_DOC: &str = "docs/local.md";
const HEADING: &str = "## Fixtures and local invocation";

/// One row: `| events/<name>.json | Function | answer |`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixtureRow {
    /// The function's logical id.
    pub function: String,
    /// The status the answer starts with; `None` for a dispatch run (`run: {...}`).
    pub status: Option<u16>,
    /// The answer's first text in backticks: what the body holds.
    pub held: Option<String>,
}

/// The rows of the first table under the heading of `text` (docs/local.md's), by fixture name.
pub fn fixture_rows_of(text: &str) -> BTreeMap<String, FixtureRow> {
    let section = text
        .split(HEADING)
        .nth(1)
        .unwrap_or_else(|| panic!("{LOCAL_DOC} has no {HEADING:?}"));
    section
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2) // the header and its rule
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            assert_eq!(cells.len(), 3, "{LOCAL_DOC}: a row of 3 cells: {line}");
            let name = cells[0]
                .trim_matches('`')
                .strip_prefix("events/")
                .and_then(|file| file.strip_suffix(".json"))
                .unwrap_or_else(|| panic!("{LOCAL_DOC}: not a fixture: {line}"));
            let answer = cells[2];
            let status = answer
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|digits| digits.parse().ok());
            assert!(
                status.is_some() || answer.starts_with("run:"),
                "{LOCAL_DOC}: the answer of events/{name}.json starts with its status or `run:`: {line}"
            );
            let row = FixtureRow {
                function: cells[1].trim_matches('`').to_owned(),
                status,
                held: answer.split('`').nth(1).map(str::to_owned),
            };
            (name.to_owned(), row)
        })
        .collect()
}

/// docs/local.md's fixture rows, read once.
pub fn fixture_rows() -> &'static BTreeMap<String, FixtureRow> {
    static ROWS: std::sync::LazyLock<BTreeMap<String, FixtureRow>> =
        std::sync::LazyLock::new(|| {
            let text = std::fs::read_to_string(repo_root().join(LOCAL_DOC)).unwrap();
            fixture_rows_of(&text)
        });
    &ROWS
}

/// What `events/<name>.json` answers as docs/local.md documents it: its status and the text its
/// body holds.
pub fn documented_answer(name: &str) -> (u16, &'static str) {
    let row = fixture_rows()
        .get(name)
        .unwrap_or_else(|| panic!("{LOCAL_DOC} has no fixture row for events/{name}.json"));
    let status = row
        .status
        .unwrap_or_else(|| panic!("{LOCAL_DOC}: events/{name}.json answers a run summary"));
    let held = row.held.as_deref().unwrap_or_else(|| {
        panic!("{LOCAL_DOC}: events/{name}.json's answer names what its body holds in backticks")
    });
    (status, held)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_read_as_written() {
        let text = "# P\n\n## Fixtures and local invocation\n\nText.\n\n| Fixture | Function | Answer |\n\
                    |---|---|---|\n\
                    | `events/health.json` | HealthFunction | 200, `{\"status\":\"ok\"}` |\n\
                    | `events/dispatch-part.json` | DispatchPartFunction | run: `{\"cause\":\"part\"}` |\n\
                    \nAfter.\n| x | y | z |\n";
        let rows = fixture_rows_of(text);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows["health"],
            FixtureRow {
                function: "HealthFunction".into(),
                status: Some(200),
                held: Some("{\"status\":\"ok\"}".into()),
            }
        );
        assert_eq!(rows["dispatch-part"].status, None);
    }
}
