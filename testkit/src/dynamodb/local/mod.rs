//! The official DynamoDB Local, started and stopped by the tests themselves: no script, no
//! supervisor, no daemon left behind.
//!
//! One JVM runs `java -Djava.library.path=<emulator>/DynamoDBLocal_lib -jar
//! <emulator>/DynamoDBLocal.jar -inMemory|-dbPath <dir> -port <port>` with its working directory
//! in a temporary directory of its own (DynamoDB Local writes `dynamodb-local-metadata.json`
//! into its working directory even in memory).
//!
//! **How the JVM dies.** It is not started directly but under a small `/bin/sh` wrapper
//! (`WRAPPER`) whose standard input is a pipe from this process, which never writes to it. The
//! wrapper starts java in the background and blocks reading that pipe; when the read ends, it
//! SIGKILLs java, waits for it and removes the working directory. The read ends when this process
//! closes its end of the pipe, which happens
//!
//! - on [`DynamoDbLocal::stop`] and when a [`DynamoDbLocal`] is dropped (which then waits for the
//!   wrapper, so java is gone when they return), and
//! - when this process ends in any way at all, `exit`, a panic that aborts, SIGKILL, because the
//!   kernel closes every descriptor of a dead process. This is what ends the shared instance of
//!   a test binary (a `static`, never dropped).
//!
//! The pipe's write end is close-on-exec (as every descriptor std opens), so no other child of the
//! test process holds it open. The wrapper ignores SIGINT, SIGQUIT, SIGTERM and SIGHUP: a Ctrl-C
//! or a supervisor's SIGTERM reaches the whole process group, and must not end the wrapper alone
//! (orphaning java, which as a background job ignores SIGINT); it ends the test process, and with
//! it, through the pipe, java and the working directory. (Java keeps the default SIGTERM and
//! SIGHUP, so it also dies of those directly.) The only way to orphan java is to SIGKILL the
//! wrapper alone (a SIGKILL to the whole process group kills java too, and leaves only the small
//! working directory behind). Java is SIGKILLed while the wrapper, its parent, has not reaped it
//! yet (dash, Debian's `/bin/sh`, reaps a background job only in `wait`: checked), so the signal
//! cannot hit a recycled pid. No extra crate is needed (no `libc`): `PR_SET_PDEATHSIG` was not used because
//! it fires when the *thread* that spawned the child ends, and tests spawn from short-lived test
//! threads.
//!
//! **The port.** DynamoDB Local cannot take port 0 ("Invalid Port. Port number must lie between 1
//! and 65535.") and would not say which port it got anyway, so a free port is found by binding
//! port 0 ourselves, closing that socket and handing the number to java. Someone else may take
//! the port in between; DynamoDB Local then prints `Failed to bind` and hangs (the JVM does not
//! exit), so that line is watched for, and the start is retried on a new port. The readiness
//! probe is a `ListTables` that must answer 200 with the instance's own CORS origin
//! (`-cors https://koe-<random>.invalid`, echoed only by the instance started with it), so a
//! DynamoDB Local of someone else's on the same port is never mistaken for ours.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::{Child, ChildStdin};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The emulator folder (holding `DynamoDBLocal.jar` and `DynamoDBLocal_lib/`).
pub const DIR_VAR: &str = "KOE_DYNAMODB_LOCAL_DIR";
/// The cache root; the emulator defaults to `$KOE_CACHE_DIR/dynamodb-local/emulator`.
pub const CACHE_VAR: &str = "KOE_CACHE_DIR";

/// How long a start may take until DynamoDB Local answers (a cold JVM on a busy 2-core machine
/// takes 2 to 5 s).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Starts on a fresh port after a lost race for the port.
const FRESH_PORT_ATTEMPTS: usize = 5;
/// Starts on the same port (a restart) while someone else holds it, one second apart.
const SAME_PORT_ATTEMPTS: usize = 10;
/// How long `stop` waits for the wrapper to kill and reap java.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// Lines of DynamoDB Local's output kept for error messages.
const OUTPUT_LINES: usize = 60;
/// A small heap and the serial collector, and only the JVM's quick compiler (C1): a test
/// instance lives seconds to minutes, and C2's compilations cost more CPU than they return
/// (the whole test binary's run: 24 -> 15 CPU-seconds, measured from /proc/stat).
const JVM_OPTIONS: &[&str] = &[
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
];

/// The wrapper: `sh -c WRAPPER koe-dynamodb-local <work dir> <java> <args>...`. Its stdin is the
/// pipe from the test process; its stdout goes to the test process (java's output, merged).
const WRAPPER: &str = r#"dir=$1; shift
trap '' INT QUIT TERM HUP
(trap - TERM HUP; exec "$@") </dev/null 2>&1 &
jvm=$!
exec >/dev/null 2>&1
read -r _ || :
kill -KILL "$jvm"
wait "$jvm"
rm -rf "$dir"
"#;

/// Where DynamoDB Local keeps its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// `-inMemory`: every start is an empty database.
    InMemory,
    /// `-dbPath` in a temporary directory of the instance's own, removed when it is dropped:
    /// `stop` then `start` (or `restart`) find the same tables and items.
    OnDisk,
}

/// Why DynamoDB Local could not be started; the message says what to do.
#[derive(Debug, Clone)]
pub struct StartError(String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

/// A DynamoDB Local of this process's own on a free loopback port, killed when dropped (and
/// when this process ends, however it ends: see the module documentation).
pub struct DynamoDbLocal {
    /// `http://127.0.0.1:<port>`, the same across `stop`/`start`/`restart`.
    pub endpoint: String,
    inner: Arc<Inner>,
}

struct Inner {
    port: u16,
    storage: Storage,
    java: PathBuf,
    emulator: PathBuf,
    /// `-dbPath` for `Storage::OnDisk`.
    db_dir: Option<PathBuf>,
    running: Mutex<Option<Jvm>>,
}

/// One run of the wrapper and its java.
struct Jvm {
    wrapper: Child,
    /// The pipe the wrapper reads; dropping it makes the wrapper kill java.
    stdin: Option<ChildStdin>,
    output: Arc<Output>,
}

/// DynamoDB Local's output so far (the last lines), and whether it has ended (java exited).
#[derive(Default)]
struct Output {
    state: Mutex<(VecDeque<String>, bool)>,
}

impl Output {
    fn tail(&self) -> String {
        let state = self.state.lock().unwrap();
        if state.0.is_empty() {
            return "(no output)".to_owned();
        }
        state.0.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    fn contains(&self, needle: &str) -> bool {
        self.state
            .lock()
            .unwrap()
            .0
            .iter()
            .any(|l| l.contains(needle))
    }

    fn ended(&self) -> bool {
        self.state.lock().unwrap().1
    }
}

enum Attempt {
    Ready(Jvm),
    /// Someone else bound the port first.
    PortTaken,
}

impl DynamoDbLocal {
    /// Starts an in-memory DynamoDB Local on a free port and waits until it answers; panics with
    /// what to do if it cannot (Java missing, emulator not fetched, no answer in time).
    pub async fn in_memory() -> DynamoDbLocal {
        Self::spawn_async(Storage::InMemory).await
    }

    /// As [`DynamoDbLocal::in_memory`], keeping the data on disk (`-dbPath`), so that the tests
    /// of an outage can `stop` it and `start` it again with the same tables and items.
    pub async fn on_disk() -> DynamoDbLocal {
        Self::spawn_async(Storage::OnDisk).await
    }

    async fn spawn_async(storage: Storage) -> DynamoDbLocal {
        blocking(move || Self::spawn(storage).unwrap_or_else(|e| panic!("{e}"))).await
    }

    /// Starts DynamoDB Local on a free port and waits until it answers (blocking: up to a minute
    /// on a cold machine, usually 2 to 5 s).
    pub fn spawn(storage: Storage) -> Result<DynamoDbLocal, StartError> {
        let java = find_java()?;
        let emulator = emulator_dir()?;
        let db_dir = match storage {
            Storage::InMemory => None,
            Storage::OnDisk => {
                let dir = temp_dir("db");
                std::fs::create_dir_all(&dir).map_err(|e| {
                    StartError(format!("DynamoDB Local: create {}: {e}", dir.display()))
                })?;
                Some(dir)
            }
        };
        // Dropping `inner` (a failed start) removes `db_dir`.
        let mut inner = Inner {
            port: 0,
            storage,
            java,
            emulator,
            db_dir,
            running: Mutex::new(None),
        };
        for _ in 0..FRESH_PORT_ATTEMPTS {
            inner.port = free_port()?;
            if let Attempt::Ready(jvm) = inner.attempt()? {
                *inner.running.get_mut().unwrap() = Some(jvm);
                return Ok(DynamoDbLocal {
                    endpoint: format!("http://127.0.0.1:{}", inner.port),
                    inner: Arc::new(inner),
                });
            }
        }
        Err(StartError(format!(
            "DynamoDB Local: {FRESH_PORT_ATTEMPTS} free ports in a row were taken before it could \
             bind them (the last {})",
            inner.port
        )))
    }

    /// The port it listens on (on every interface: DynamoDB Local has no bind-address option;
    /// the tests talk to it on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.inner.port
    }

    pub fn storage(&self) -> Storage {
        self.inner.storage
    }

    /// Whether it was started and not stopped since (not whether it still answers).
    pub fn is_running(&self) -> bool {
        self.inner.running.lock().unwrap().is_some()
    }

    /// Kills the JVM (SIGKILL: an outage, not a shutdown) and waits until it is gone: the port
    /// refuses connections until `start`. Nothing happens if it is stopped already.
    pub async fn stop(&self) {
        let inner = self.inner.clone();
        blocking(move || inner.stop()).await
    }

    /// Starts it again on the same port (with the same data if `Storage::OnDisk`) and waits
    /// until it answers; panics if it cannot. Nothing happens if it is running.
    pub async fn start(&self) {
        let inner = self.inner.clone();
        blocking(move || inner.start_again().unwrap_or_else(|e| panic!("{e}"))).await
    }

    /// `stop`, then `start`.
    pub async fn restart(&self) {
        let inner = self.inner.clone();
        blocking(move || {
            inner.stop();
            inner.start_again().unwrap_or_else(|e| panic!("{e}"))
        })
        .await
    }
}

impl Drop for DynamoDbLocal {
    fn drop(&mut self) {
        self.inner.stop();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop();
        remove_dir(self.db_dir.as_deref());
    }
}

mod host;
mod jvm;
#[cfg(test)]
mod tests;

pub(crate) use self::host::blocking;
pub use self::host::emulator_dir;
use self::host::{find_java, free_port, remove_dir, temp_dir};
