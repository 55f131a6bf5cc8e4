//! Prints an `events/` fixture whose date must be fresh (today: `create-call`), valid now:
//! everything from the committed file, `scheduledAt` the next 07:00 in Japan at least an hour
//! away (POST /calls accepts 10 seconds to 30 days ahead). For `sam local invoke -e -` or a file
//! for `cargo lambda invoke --data-file`:
//!
//! ```sh
//! cargo run -q -p koe-testkit --bin fixture -- create-call | sam local invoke CreateCallFunction -e - --env-vars events/env.json
//! ```

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name] = args.as_slice() else {
        eprintln!(
            "usage: fixture <name>   (one of: {})",
            koe_testkit::fixtures::DATED.join(", ")
        );
        return ExitCode::FAILURE;
    };
    let Some(event) = koe_testkit::fixtures::dated(name, chrono::Utc::now()) else {
        eprintln!(
            "fixture: events/{name}.json has no date to refresh (dated fixtures: {}); use the file as it is",
            koe_testkit::fixtures::DATED.join(", ")
        );
        return ExitCode::FAILURE;
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&event).expect("JSON prints")
    );
    ExitCode::SUCCESS
}
