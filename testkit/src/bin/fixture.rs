//! Prints an `events/` fixture that cannot be committed as it is used:
//! - `create-call`: everything from the committed file, `scheduledAt` the next 07:00 in Japan at
//!   least an hour away (POST /calls accepts 10 seconds to 30 days ahead);
//! - `agent-round2`: the committed round 2, answering the steps of the round 1 answer read from
//!   stdin (the `sam local invoke` / `cargo lambda invoke` output, or just its body) by their ids.
//!
//! For `sam local invoke -e -` or a file for `cargo lambda invoke --data-file`:
//!
//! ```sh
//! cargo run -q -p koe-testkit --bin fixture -- create-call | sam local invoke CreateCallFunction -e - --env-vars events/env.json
//! ```

use std::io::Read;
use std::process::ExitCode;

use serde_json::Value;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || {
        eprintln!(
            "usage: fixture <name>   (one of: {}; agent-round2 reads round 1's answer on stdin)",
            koe_testkit::fixtures::GENERATED.join(", ")
        );
        ExitCode::FAILURE
    };
    let [name] = args.as_slice() else {
        return usage();
    };
    let event = match name.as_str() {
        "create-call" => koe_testkit::fixtures::create_call(chrono::Utc::now()),
        "agent-round2" => {
            let mut input = String::new();
            if let Err(e) = std::io::stdin().read_to_string(&mut input) {
                eprintln!("fixture: reading stdin: {e}");
                return ExitCode::FAILURE;
            }
            // sam local invoke prints its own lines around the answer: take the last JSON line.
            let round1 = serde_json::from_str::<Value>(&input).ok().or_else(|| {
                input
                    .lines()
                    .rev()
                    .find_map(|line| serde_json::from_str::<Value>(line.trim()).ok())
            });
            let Some(round1) = round1 else {
                eprintln!("fixture: stdin holds no JSON answer of round 1");
                return ExitCode::FAILURE;
            };
            match koe_testkit::fixtures::agent_round2(&round1) {
                Ok(event) => event,
                Err(e) => {
                    eprintln!("fixture: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        other => {
            eprintln!("fixture: events/{other}.json is used as it is");
            return usage();
        }
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&event).expect("JSON prints")
    );
    ExitCode::SUCCESS
}
