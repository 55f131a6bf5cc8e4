//! docs/spend-guard.md's slack table: how each ceiling is counted
//! (`koe::model::spend_guard::LeasePlan`), and by how much the count can pass it.

use koe::model::spend_guard::LeasePlan;
use koe::model::spend_guard::lease::LARGEST_CALL;
use koe::platform::config::spend::DEFAULT_DAILY_TOKEN_CEILING;

use super::thousands as grouped;

/// What the docs' tests and benchmarks reserve a call: "hi" and `maxTokens` 375.
const SMALL_CALL: u64 = 400;

pub(super) fn table() -> String {
    let mut rows = vec![
        "| ceiling | counters × share | slack: largest calls | 400-token |".to_owned(),
        "|---|---|---|---|".to_owned(),
    ];
    for ceiling in [60_000, 1_000_000, DEFAULT_DAILY_TOKEN_CEILING, 100_000_000] {
        let plan = LeasePlan::for_ceiling(ceiling);
        let largest = plan.slack(LARGEST_CALL);
        let name = if ceiling == DEFAULT_DAILY_TOKEN_CEILING {
            format!("{} (default)", grouped(ceiling))
        } else {
            grouped(ceiling)
        };
        rows.push(format!(
            "| {name} | {} × {} | {} ({:.0} %) | {} |",
            plan.shards,
            grouped(plan.share),
            grouped(largest),
            largest as f64 * 100.0 / ceiling as f64,
            grouped(plan.slack(SMALL_CALL)),
        ));
    }
    rows.join("\n")
}

#[cfg(test)]
mod tests {
    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(super::grouped(60_000), "60,000");
        assert_eq!(super::grouped(100_000_000), "100,000,000");
        assert_eq!(super::grouped(400), "400");
    }
}
