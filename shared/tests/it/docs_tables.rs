//! The docs' generated blocks are what the code writes (`koe_testkit::docs_tables`): a block
//! edited by hand, or code changed without `cargo run -p koe-testkit --bin docs-tables`, fails
//! here.

use koe_testkit::docs_tables::{BLOCKS, render, stale, with_block, written};

#[tokio::test]
async fn every_generated_block_is_what_docs_tables_writes() {
    let stale = stale().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        stale.is_empty(),
        "generated blocks differ from the code ({}): run `cargo run -p koe-testkit --bin \
         docs-tables` (a block is never edited by hand)",
        stale.join(", ")
    );
}

#[tokio::test]
async fn a_hand_edit_to_a_block_is_told_from_the_written_page() {
    for (path, text) in written().await.unwrap() {
        let names = BLOCKS.iter().filter(|(_, page)| path.ends_with(page));
        for (name, _) in names {
            let body = render(name).await;
            assert!(text.contains(&body), "{}: {name}", path.display());
            // A figure changed by hand inside the block is put back.
            let edited = text.replacen(&body, &format!("{body}| a row by hand |\n"), 1);
            assert_ne!(edited, text, "{name}");
            assert_eq!(with_block(&edited, name, &body).unwrap(), text);
        }
    }
}

#[tokio::test]
async fn the_tables_hold_the_routes_the_settings_the_budgets_and_the_units() {
    let fixtures = render("fixtures").await;
    for route in koe::ROUTES.iter() {
        let row = format!("| `events/{}.json` | {} |", route.binary, route.function);
        assert!(fixtures.contains(&row), "{row}");
    }
    let settings = render("settings").await;
    let row = "| `AGENT_DAILY_LIMIT` | agent | `50` | 1 to 100000 | = |";
    assert!(settings.contains(row), "{settings}");
    let budgets = render("time-budgets").await;
    assert!(
        budgets.contains("DispatchFunction, DispatchPartFunction"),
        "{budgets}"
    );
    // Issue 38: a call to a device without `confirmsCalls` is at most 5 write units: alone in
    // its second 4 (its claim, its batch's mark, its outcome and index entry), and its device
    // read.
    let units = render("units-per-call").await;
    let row = "| a device without `confirmsCalls` | 4 / 1 |";
    assert!(units.contains(row), "{units}");
    // Issue 51: each request's units are the limits model's charges on the adapter's items: a
    // cancel is its read, its transaction's two writes at twice a write, and the index entry it
    // removes; a reservation's put that replaces an indexed record moves its entry (2).
    let requests = render("requests").await;
    for units in [
        "| `callId = :callId AND status = scheduled`, no push | 1 RRU + 4 WRU + 1 index |",
        "| 1 WRU + 1 index (2 if it replaces an indexed record) |",
        "| `dueShard`: shard 0 with the count, then the count's others (every `w`-th in part of \
         `w`) | | 0.5 RRU per 4 KB |",
    ] {
        assert!(requests.contains(units), "{units}\n{requests}");
    }
}
