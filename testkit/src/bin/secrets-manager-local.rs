//! A local Secrets Manager for `sam local invoke` with `events/env.json`: the stand-in
//! (`koe_testkit::secretsmanager`) holding exactly the secrets env.json names by ARN, with the
//! values the fixtures expect, on the port of env.json's `AWS_ENDPOINT_URL_SECRETS_MANAGER`:
//!
//! ```sh
//! cargo run -q -p koe-testkit --bin secrets-manager-local &   # prints http://127.0.0.1:8082
//! ```
//!
//! It listens on every interface (`0.0.0.0`), as SAM's containers reach the host through
//! `host.docker.internal` (on Linux the Docker bridge's address, not loopback); an ADDR argument
//! (e.g. `127.0.0.1:0`, a free loopback port) overrides that. It serves until Ctrl-C or a kill.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use koe_testkit::secretsmanager::StandInSecretsManager;
use koe_testkit::{fixtures, loopback};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let addr = match std::env::args().nth(1) {
        None => SocketAddr::from((Ipv4Addr::UNSPECIFIED, fixtures::secrets_manager_port())),
        Some(arg) => match arg.parse::<SocketAddr>() {
            Ok(addr) => addr,
            Err(_) => {
                eprintln!(
                    "usage: secrets-manager-local [ADDR]   (default: events/env.json's port on 0.0.0.0)"
                );
                return ExitCode::from(2);
            }
        },
    };
    let started = StandInSecretsManager::start_with_fixture_secrets(addr).await;
    let standin = loopback::listening_or_exit("secrets-manager-local", addr, started);
    // The one line on stdout: the URL on this host (a container uses events/env.json's).
    let url = standin.endpoint().replace("0.0.0.0", "127.0.0.1");
    loopback::print_url(&url);
    eprintln!(
        "secrets-manager-local: serving {} secrets of events/env.json at {url} until Ctrl-C",
        fixtures::secrets().len()
    );
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}
