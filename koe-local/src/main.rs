//! `koe-local`: every route of both APIs on loopback, with the same paths and services as the
//! Lambdas. Chat API on `CHAT_ADDR` (127.0.0.1:3000), agent API on `AGENT_ADDR` (127.0.0.1:3001).
//! `--help` prints every setting it reads.

use std::process::ExitCode;

use koe::App;
use koe::platform::config::Vars;
use koe_local::LocalConfig;

/// The agent API key koe-local accepts when `AGENT_API_KEYS` is not set.
const LOCAL_DEV_KEY: &str = "local-dev-key";
/// The step-id signing key koe-local uses when `AGENT_STEP_KEY` is not set (loopback only; a
/// Lambda without the key does not start).
const LOCAL_STEP_KEY: &str = "koe-local-step-key-for-development-only";

#[tokio::main]
async fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        None => {}
        Some("--help" | "-h") => {
            print!("{}", koe_local::help::text());
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!("koe-local: no argument {other:?} (only --help); settings are variables");
            return ExitCode::from(2);
        }
    }
    koe::platform::telemetry::init_local();
    let vars = Vars::from_env();
    let vars = if vars.get("AGENT_API_KEYS").is_none() {
        // Local runs only (loopback): a documented development key, so the agent API works
        // out of the box. Lambdas have no such default.
        tracing::info!(
            "AGENT_API_KEYS is not set: the agent API accepts the development key from the README"
        );
        vars.with("AGENT_API_KEYS", LOCAL_DEV_KEY)
    } else {
        vars
    };
    let vars = if vars.get("AGENT_STEP_KEY").is_none() {
        vars.with("AGENT_STEP_KEY", LOCAL_STEP_KEY)
    } else {
        vars
    };
    let local_config = match LocalConfig::from_vars(&vars) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("koe-local: {e}");
            return ExitCode::FAILURE;
        }
    };
    let app = App::local(vars);
    // Every section at once, so a bad value stops koe-local before it listens.
    if let Err(e) = app.check_config() {
        eprintln!("koe-local: {e}");
        return ExitCode::FAILURE;
    }
    match koe_local::start(app, &local_config).await {
        Ok(running) => {
            running.until_ctrl_c().await;
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("koe-local: {e}");
            ExitCode::FAILURE
        }
    }
}
