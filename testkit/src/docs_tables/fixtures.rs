//! docs/local.md's fixtures: a row per `events/` fixture (each route's, from `koe::ROUTES` and
//! `koe::app::STREAMED`, then the dispatcher's events), and the `sam local invoke` and
//! `cargo lambda invoke` commands that send each.

use koe::ROUTES;
use koe::app::STREAMED;
use koe::platform::endpoint::FixtureAnswer;

use super::code;

/// One fixture: `events/<name>.json`, the function it is for (its binary for cargo-lambda, if it
/// is a route's), what it answers.
struct Fixture {
    name: &'static str,
    function: &'static str,
    binary: Option<&'static str>,
    answer: String,
}

/// What a route's fixture answers, as its route says (`Route::fixture`) and the fixture tests
/// (`functions/tests/fixtures/`, `lambda_fixtures`) check: its status, then what its body holds.
fn answer(fixture: FixtureAnswer) -> String {
    match fixture.holds {
        "" => fixture.status.to_string(),
        holds => format!("{}, `{holds}`", fixture.status),
    }
}

/// Fixtures that are no route's: (name, function, binary for cargo-lambda, the fixture after
/// which it comes, what it answers).
const OTHER_EVENTS: &[(&str, &str, Option<&str>, &str, &str)] = &[
    (
        "agent-round2",
        "AgentFunction",
        Some("agent"),
        "agent",
        "200, the answer",
    ),
    (
        "dispatch-schedule",
        "DispatchFunction",
        None,
        "dispatch",
        "run: `{\"cause\":\"schedule\",...}`",
    ),
    (
        "dispatch-requested",
        "DispatchFunction",
        None,
        "dispatch-schedule",
        "run: `{\"cause\":\"request\",...}`",
    ),
    (
        "dispatch-wake",
        "DispatchFunction",
        None,
        "dispatch-requested",
        "run: `{\"cause\":\"wake\",...}`",
    ),
    (
        "dispatch-part",
        "DispatchPartFunction",
        None,
        "dispatch-wake",
        "run: `{\"cause\":\"part\",...}`, all 0 unless a minute has 2 or more \
         [shards](dispatch.md#how-a-run-works)",
    ),
];

/// Every fixture, in the order the commands send them: the routes' (a streamed function's after
/// its route), each other event after the one it follows.
fn fixtures() -> Vec<Fixture> {
    let mut out: Vec<Fixture> = Vec::new();
    let of_route = |route: &'static koe::platform::endpoint::Route| Fixture {
        name: route.binary,
        function: route.function,
        binary: Some(route.binary),
        answer: answer(route.fixture),
    };
    for route in ROUTES.iter() {
        out.push(of_route(route));
        for streamed in STREAMED.iter().map(|s| &s.route) {
            if streamed.path == route.path && streamed.method == route.method {
                out.push(of_route(streamed));
            }
        }
    }
    for (name, function, binary, after, answer) in OTHER_EVENTS {
        let at = out.iter().position(|f| f.name == *after).expect(after) + 1;
        let answer = answer.to_string();
        out.insert(
            at,
            Fixture {
                name,
                function,
                binary: *binary,
                answer,
            },
        );
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
