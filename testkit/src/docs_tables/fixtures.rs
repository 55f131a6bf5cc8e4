//! docs/local.md's fixtures: a row per `events/` fixture (each route's, from `koe::ROUTES` and
//! `koe::app::STREAMED`, then the dispatcher's events), and the `sam local invoke` and
//! `cargo lambda invoke` commands that send each.

use koe::ROUTES;
use koe::app::STREAMED;

use super::code;

/// One fixture: `events/<name>.json`, the function it is for (its binary for cargo-lambda, if it
/// is a route's), what it answers.
struct Fixture {
    name: &'static str,
    function: &'static str,
    binary: Option<&'static str>,
    answer: &'static str,
}

/// What a fixture answers, as the fixture test (`functions/tests/fixtures/`, `lambda_fixtures`)
/// expects it: its status, then what its body holds in backticks; `run:` for a dispatch run.
/// (One place to adapt once a route carries its expected answer.)
fn answer(name: &str) -> &'static str {
    match name {
        "put-device" => "200, the device",
        "create-call" => "201, the reservation",
        "get-call" => "200, that reservation",
        "confirm-call" => "404, no push of it has left",
        "cancel-call" => "204",
        "agent" => "200, a plan",
        "agent-round2" => "200, the answer",
        "health" => "200, `{\"status\":\"ok\"}`",
        "info" => "200, `{\"maintenance\":false,...}`",
        "chat" => "200, the stand-in's reply",
        "chat-stream" => "200, server-sent events",
        "error-test" => "500, `TEST_ERROR`",
        "dispatch" => "401, a placeholder token",
        "dispatch-schedule" => "run: `{\"cause\":\"schedule\",...}`",
        "dispatch-requested" => "run: `{\"cause\":\"request\",...}`",
        "dispatch-wake" => "run: `{\"cause\":\"wake\",...}`",
        "dispatch-part" => {
            "run: `{\"cause\":\"part\",...}`, all 0 unless a minute has 2 or more \
             [shards](dispatch.md#how-a-run-works)"
        }
        other => panic!("events/{other}.json: no answer in docs_tables::fixtures::answer"),
    }
}

/// Fixtures that are no route's: (name, function, binary for cargo-lambda, the fixture after
/// which it comes).
const OTHER_EVENTS: &[(&str, &str, Option<&str>, &str)] = &[
    ("agent-round2", "AgentFunction", Some("agent"), "agent"),
    ("dispatch-schedule", "DispatchFunction", None, "dispatch"),
    (
        "dispatch-requested",
        "DispatchFunction",
        None,
        "dispatch-schedule",
    ),
    (
        "dispatch-wake",
        "DispatchFunction",
        None,
        "dispatch-requested",
    ),
    (
        "dispatch-part",
        "DispatchPartFunction",
        None,
        "dispatch-wake",
    ),
];

/// Every fixture, in the order the commands send them: the routes' (a streamed function's after
/// its route), each other event after the one it follows.
fn fixtures() -> Vec<Fixture> {
    let mut out: Vec<Fixture> = Vec::new();
    let fixture = |name, function, binary| Fixture {
        name,
        function,
        binary,
        answer: answer(name),
    };
    for route in ROUTES.iter() {
        out.push(fixture(route.binary, route.function, Some(route.binary)));
        for streamed in STREAMED.iter().map(|s| &s.route) {
            if streamed.path == route.path && streamed.method == route.method {
                let binary = Some(streamed.binary);
                out.push(fixture(streamed.binary, streamed.function, binary));
            }
        }
    }
    for (name, function, binary, after) in OTHER_EVENTS {
        let at = out.iter().position(|f| f.name == *after).expect(after) + 1;
        out.insert(at, fixture(name, function, *binary));
    }
    out
}

/// The command that prints a generated fixture (`testkit/src/fixtures.rs`), reading what it
/// answers from stdin.
fn generator(name: &str) -> Option<String> {
    let stdin = match name {
        "agent-round2" => " </tmp/round1.json",
        _ => "",
    };
    crate::fixtures::GENERATED
        .contains(&name)
        .then(|| format!("cargo run -q -p koe-testkit --bin fixture -- {name}{stdin}"))
}

/// What a fixture's answer is kept in, for a generated fixture that reads it.
fn kept(name: &str) -> Option<&'static str> {
    (name == "agent").then_some("/tmp/round1.json")
}

pub(super) fn table() -> String {
    let mut out = String::from("| Fixture | Function | Answer |\n|---|---|---|\n");
    for f in fixtures() {
        let file = code(&format!("events/{}.json", f.name));
        out += &format!("| {file} | {} | {} |\n", f.function, f.answer);
    }
    out
}

pub(super) fn sam_commands() -> String {
    let mut out = String::from("```sh\n");
    let env = "--env-vars events/env.json";
    for f in fixtures() {
        let function = f.function;
        let tee = kept(f.name).map_or(String::new(), |file| format!(" | tee {file}"));
        match generator(f.name) {
            Some(made) => {
                out += &format!("{made} \\\n  | sam local invoke {function} -e - {env}{tee}\n")
            }
            None => {
                let file = format!("events/{}.json", f.name);
                out += &format!("sam local invoke {function} -e {file} {env}{tee}\n");
            }
        }
    }
    out + "```\n"
}

/// The HTTP fixtures of a function of its own (the dispatch route's needs a signed token).
pub(super) fn cargo_lambda_commands() -> String {
    let mut out = String::from("```sh\n");
    for f in fixtures() {
        let Some(binary) = f.binary.filter(|b| *b != "dispatch") else {
            continue;
        };
        let tee = kept(f.name).map_or(String::new(), |file| format!(" | tee {file}"));
        match generator(f.name) {
            Some(made) => {
                let file = format!("/tmp/{}.json", f.name);
                out += &format!("{made} >{file}\ninvoke {binary} {file}{tee}\n");
            }
            None => out += &format!("invoke {binary} events/{}.json{tee}\n", f.name),
        }
    }
    out + "```\n"
}
