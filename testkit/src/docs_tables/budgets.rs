//! docs/reliability.md's time budgets: what no deadline cuts, added up by
//! `koe::app::budgets::at_the_limits` (held to the template by `time_budgets.rs`), beside each
//! function's `Timeout` in `template.yaml`.

use std::time::Duration;

use koe::app::budgets::at_the_limits;

use crate::template::load_yaml;

/// Seconds as the docs write them: `0.5 s`, `25 s`.
pub(super) fn seconds(duration: Duration) -> String {
    format!("{} s", duration.as_secs_f64())
}

pub(super) fn table() -> String {
    let template = load_yaml("template.yaml");
    let timeout = |id: &str| {
        let function = &template["Resources"][id]["Properties"]["Timeout"];
        let secs = function
            .as_u64()
            .or_else(|| template["Globals"]["Function"]["Timeout"].as_u64())
            .unwrap_or_else(|| panic!("{id} has no Timeout"));
        Duration::from_secs(secs)
    };
    // Functions with the same parts and timeout share a row.
    let mut rows: Vec<(Vec<&str>, String, Duration)> = Vec::new();
    for budget in at_the_limits() {
        let parts: Vec<String> = budget
            .parts
            .iter()
            // The part's name without its explanation (`budgets.rs` keeps that).
            .map(|(what, d)| format!("{} {}", what.split(" (").next().unwrap(), seconds(*d)))
            .collect();
        let sum = format!("{} = {}", parts.join(" + "), seconds(budget.total()));
        let limit = timeout(budget.function);
        match rows.iter_mut().find(|(_, s, l)| *s == sum && *l == limit) {
            Some(row) => row.0.push(budget.function),
            None => rows.push((vec![budget.function], sum, limit)),
        }
    }
    let mut out = String::from("| function | worst case | timeout |\n| --- | --- | --- |\n");
    for (functions, sum, limit) in rows {
        out += &format!(
            "| {} | {sum} | {} |\n",
            functions.join(", "),
            seconds(limit)
        );
    }
    out
}
