//! `koe-local`: every route of both APIs on loopback, with the same paths and handlers as the
//! Lambdas. Chat API on `CHAT_ADDR` (127.0.0.1:3000), agent API on `AGENT_ADDR` (127.0.0.1:3001).

use std::process::ExitCode;
use std::sync::Arc;

use koe::config::{ApiKeys, Config, Vars};
use koe::entrypoints::local::{self, LocalConfig};

/// The agent API key koe-local accepts when `AGENT_API_KEYS` is not set.
const LOCAL_DEV_KEY: &str = "local-dev-key";

#[tokio::main]
async fn main() -> ExitCode {
    koe::telemetry::init_local();
    let vars = Vars::from_env();
    let (mut config, local_config) = match (Config::from_vars(&vars), LocalConfig::from_vars(&vars))
    {
        (Ok(config), Ok(local_config)) => (config, local_config),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("koe-local: {e}");
            return ExitCode::FAILURE;
        }
    };
    if config.agent.api_keys.is_empty() {
        // Local runs only (loopback): a documented development key, so the agent API works
        // out of the box. Lambdas have no such default.
        config.agent.api_keys = ApiKeys::parse(Some(LOCAL_DEV_KEY));
        tracing::info!(
            "AGENT_API_KEYS is not set: the agent API accepts the development key from the README"
        );
    }
    let app = Arc::new(koe::App::from_config(config).await);
    match local::start(app, &local_config).await {
        Ok(running) => {
            running.until_ctrl_c().await;
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("koe-local: cannot listen: {e}");
            ExitCode::FAILURE
        }
    }
}
