//! The stand-in OpenAI Chat Completions server (`koe_testkit::openai`) as a process, for runs of
//! koe-local that need a provider without the network (e.g. `scripts/schemathesis.sh`):
//!
//! ```sh
//! cargo run -q -p koe-testkit --bin standin-openai -- 127.0.0.1:0   # prints its OPENAI_BASE_URL
//! ```
//!
//! Every request gets a completion: for a structured-output request (`response_format`
//! `json_schema`, as `POST /agent`'s planner and responder send), a small instance of the
//! request's own schema; for any other, a short text. It serves until it is killed.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use koe_testkit::openai::{Behaviour, StandInOpenAi};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let arg = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let Ok(addr) = arg.parse::<SocketAddr>() else {
        eprintln!("usage: standin-openai [ADDR]   (default 127.0.0.1:0: a free loopback port)");
        return ExitCode::from(2);
    };
    let standin = match StandInOpenAi::start_on(addr).await {
        Ok(standin) => standin,
        Err(e) => {
            eprintln!("standin-openai: cannot listen on {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    standin.set_default(Behaviour::schema_valid());
    // The one line on stdout: the value for OPENAI_BASE_URL.
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "{}", standin.base_url());
    let _ = stdout.flush();
    eprintln!("standin-openai: serving at {}", standin.base_url());
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}
