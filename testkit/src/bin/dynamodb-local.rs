//! Runs DynamoDB Local in memory on a free loopback port for as long as this process lives, and
//! prints its URL (`http://127.0.0.1:<port>`) as the only line on stdout once it answers. For
//! scripts that need one for a while (`scripts/test.sh` runs schemathesis on it):
//!
//! ```sh
//! dynamodb-local >url.txt &   # then wait for the line; `kill %1` when done
//! ```
//!
//! However this process ends (SIGTERM, SIGKILL, Ctrl-C), the JVM ends with it: see
//! `koe_testkit::dynamodb::DynamoDbLocal`. And it ends by itself within a second of its parent
//! (the script) ending, however that ends, so nothing outlives a killed script. Needs `java` and the emulator
//! (`scripts/dynamodb-local.sh fetch`); says how to get them if either is missing.

use std::io::Write;
use std::os::unix::process::parent_id;
use std::process::ExitCode;
use std::time::Duration;

use koe_testkit::dynamodb::{DynamoDbLocal, Storage};

fn main() -> ExitCode {
    let parent = parent_id();
    let instance = match DynamoDbLocal::spawn(Storage::InMemory) {
        Ok(instance) => instance,
        Err(e) => {
            eprintln!("dynamodb-local: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout();
    if writeln!(stdout, "{}", instance.endpoint)
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    // Until the parent is gone (this process is then re-parented); dropping `instance` kills
    // the JVM.
    while parent_id() == parent {
        std::thread::sleep(Duration::from_secs(1));
    }
    drop(instance);
    ExitCode::SUCCESS
}
