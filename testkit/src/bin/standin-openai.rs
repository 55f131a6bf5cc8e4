//! The stand-in OpenAI Chat Completions server (`koe_testkit::openai`) as a process, for runs of
//! koe-local that need a provider without the network (e.g. `scripts/schemathesis.sh`):
//!
//! ```sh
//! cargo run -q -p koe-testkit --bin standin-openai -- 127.0.0.1:0   # prints its OPENAI_BASE_URL
//! ```
//!
//! Every request gets a completion: for a structured-output request (`response_format`
//! `json_schema`, as `POST /agent`'s planner and responder send), a small instance of the
//! request's own schema; for any other, the reply docs/local.md's fixture table shows
//! ([`fixtures::REPLY`]). It serves until it is killed.
//!
//! With `STANDIN_REPLY` set, every request gets that reply instead, written at a pace
//! (`STANDIN_FIRST_TOKEN_MS`, default 300; `STANDIN_TOKENS_PER_SECOND`, default 30): streamed
//! to a `stream: true` request, whole (once the pace would have written it) otherwise
//! (`bench/chat-stream.sh`).

use std::net::SocketAddr;
use std::process::ExitCode;

use std::time::Duration;

use koe_testkit::openai::{Behaviour, Pace, StandInOpenAi};
use koe_testkit::{fixtures, loopback};

/// The scripted reply and its pace, from `STANDIN_*` (see the module's doc).
fn paced_reply() -> Result<Option<Behaviour>, String> {
    let Ok(reply) = std::env::var("STANDIN_REPLY") else {
        return Ok(None);
    };
    let number = |name: &str, default: f64| match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => v
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite() && *n >= 0.0)
            .ok_or(format!("{name} must be a number >= 0, not {v:?}")),
    };
    let pace = Pace {
        first_token: Duration::from_secs_f64(number("STANDIN_FIRST_TOKEN_MS", 300.0)? / 1000.0),
        tokens_per_second: number("STANDIN_TOKENS_PER_SECOND", 30.0)?,
    };
    Ok(Some(Behaviour::streamed(reply, pace)))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let arg = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let Ok(addr) = arg.parse::<SocketAddr>() else {
        eprintln!("usage: standin-openai [ADDR]   (default 127.0.0.1:0: a free loopback port)");
        return ExitCode::from(2);
    };
    let started = StandInOpenAi::start_on(addr).await;
    let standin = loopback::listening_or_exit("standin-openai", addr, started);
    match paced_reply() {
        Ok(reply) => standin.set_default(reply.unwrap_or_else(|| Behaviour::SchemaValid {
            text: fixtures::REPLY.into(),
        })),
        Err(e) => {
            eprintln!("standin-openai: {e}");
            return ExitCode::from(2);
        }
    }
    // The one line on stdout: the value for OPENAI_BASE_URL.
    loopback::print_url(&standin.base_url());
    eprintln!("standin-openai: serving at {}", standin.base_url());
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}
