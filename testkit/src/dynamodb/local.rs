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
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

impl Inner {
    /// Starts the JVM on `self.port` and waits until it answers.
    fn attempt(&self) -> Result<Attempt, StartError> {
        let work_dir = temp_dir("run");
        std::fs::create_dir_all(&work_dir).map_err(|e| {
            StartError(format!(
                "DynamoDB Local: create {}: {e}",
                work_dir.display()
            ))
        })?;
        let origin = format!("https://koe-{:016x}.invalid", fastrand::u64(..));
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(WRAPPER)
            .arg("koe-dynamodb-local")
            .arg(&work_dir)
            .arg(&self.java)
            .args(JVM_OPTIONS)
            .arg(format!(
                "-Djava.library.path={}",
                self.emulator.join("DynamoDBLocal_lib").display()
            ))
            .arg("-jar")
            .arg(self.emulator.join("DynamoDBLocal.jar"));
        match &self.db_dir {
            Some(dir) => command.arg("-dbPath").arg(dir),
            None => command.arg("-inMemory"),
        };
        command
            .arg("-port")
            .arg(self.port.to_string())
            .args(["-disableTelemetry", "-cors", &origin])
            .current_dir(&work_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut wrapper = command.spawn().map_err(|e| {
            remove_dir(Some(&work_dir));
            StartError(format!("DynamoDB Local: cannot run /bin/sh: {e}"))
        })?;
        let output = Arc::new(Output::default());
        let stdout = wrapper.stdout.take().expect("piped stdout");
        let reader = output.clone();
        std::thread::Builder::new()
            .name(format!("dynamodb-local-{}", self.port))
            .spawn(move || collect_output(stdout, &reader))
            .map_err(|e| StartError(format!("DynamoDB Local: output thread: {e}")))?;
        let mut jvm = Jvm {
            stdin: wrapper.stdin.take(),
            wrapper,
            output,
        };

        let started = Instant::now();
        loop {
            if jvm.output.contains("Failed to bind") || jvm.output.contains("BindException") {
                jvm.kill();
                return Ok(Attempt::PortTaken);
            }
            if probe(self.port, &origin) {
                return Ok(Attempt::Ready(jvm));
            }
            let exited = jvm.output.ended() || matches!(jvm.wrapper.try_wait(), Ok(Some(_)));
            if exited || started.elapsed() > START_TIMEOUT {
                jvm.kill();
                let what = if exited {
                    "exited".to_owned()
                } else {
                    format!("did not answer within {} s", START_TIMEOUT.as_secs())
                };
                return Err(StartError(format!(
                    "DynamoDB Local ({} -jar {}/DynamoDBLocal.jar, port {}) {what}; its output:\n{}",
                    self.java.display(),
                    self.emulator.display(),
                    self.port,
                    jvm.output.tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(&self) {
        if let Some(mut jvm) = self.running.lock().unwrap().take() {
            jvm.kill();
        }
    }

    /// Starts it on its port again, waiting out someone else holding the port for a while.
    fn start_again(&self) -> Result<(), StartError> {
        let mut running = self.running.lock().unwrap();
        if running.is_some() {
            return Ok(());
        }
        for attempt in 1..=SAME_PORT_ATTEMPTS {
            match self.attempt()? {
                Attempt::Ready(jvm) => {
                    *running = Some(jvm);
                    return Ok(());
                }
                Attempt::PortTaken if attempt < SAME_PORT_ATTEMPTS => {
                    std::thread::sleep(Duration::from_secs(1))
                }
                Attempt::PortTaken => {}
            }
        }
        Err(StartError(format!(
            "DynamoDB Local: port {} stayed taken by someone else for {SAME_PORT_ATTEMPTS} s, \
             so it could not start again there",
            self.port
        )))
    }
}

impl Jvm {
    /// Closes the wrapper's pipe (it SIGKILLs java, waits for it, removes the working directory
    /// and exits) and waits for the wrapper.
    fn kill(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match self.wrapper.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) => {
                    eprintln!(
                        "koe-testkit: DynamoDB Local's wrapper (pid {}) did not end within {} s \
                         of its pipe closing; killing it (java may survive it)",
                        self.wrapper.id(),
                        STOP_TIMEOUT.as_secs()
                    );
                    let _ = self.wrapper.kill();
                    let _ = self.wrapper.wait();
                    return;
                }
            }
        }
    }
}

impl Drop for Jvm {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads the wrapper's stdout (java's stdout and stderr) until java exits.
fn collect_output(stdout: impl Read, output: &Output) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let mut state = output.state.lock().unwrap();
        if state.0.len() == OUTPUT_LINES {
            state.0.pop_front();
        }
        state.0.push_back(line);
    }
    output.state.lock().unwrap().1 = true;
}

/// Whether DynamoDB Local answers `ListTables` with 200 and echoes `origin` (the CORS origin it
/// was started with, so this is our instance). DynamoDB Local reads the access key id and
/// region out of the `Authorization` header but does not check the signature.
fn probe(port: u16, origin: &str) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(500)) else {
        return false;
    };
    let body = "{}";
    let request = format!(
        "POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: {origin}\r\n\
         X-Amz-Target: DynamoDB_20120810.ListTables\r\n\
         Content-Type: application/x-amz-json-1.0\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=probe/20200101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let timeout = Some(Duration::from_secs(2));
    if stream.set_read_timeout(timeout).is_err()
        || stream.set_write_timeout(timeout).is_err()
        || stream.write_all(request.as_bytes()).is_err()
    {
        return false;
    }
    let mut response = String::new();
    if BufReader::new(stream)
        .take(64 * 1024)
        .read_to_string(&mut response)
        .is_err()
    {
        return false;
    }
    let mut lines = response.lines();
    let ok = lines
        .next()
        .is_some_and(|status| status.starts_with("HTTP/1.1 200"));
    let ours = lines.take_while(|l| !l.is_empty()).any(|header| {
        header.split_once(':').is_some_and(|(name, value)| {
            name.eq_ignore_ascii_case("access-control-allow-origin") && value.trim() == origin
        })
    });
    ok && ours
}

/// A port that is free now on every interface (where DynamoDB Local binds).
fn free_port() -> Result<u16, StartError> {
    TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|e| StartError(format!("DynamoDB Local: no free port: {e}")))
}

/// `java` on `PATH`, or what to do.
fn find_java() -> Result<PathBuf, StartError> {
    find_java_in(std::env::var_os("PATH"))
}

fn find_java_in(path: Option<std::ffi::OsString>) -> Result<PathBuf, StartError> {
    let found = path.and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("java"))
            .find(|candidate| is_executable(candidate))
    });
    found.ok_or_else(|| {
        StartError(
            "DynamoDB Local needs Java (a JRE 11 or newer; OpenJDK 17 is what CI uses), and there \
             is no `java` on PATH. On Debian/Ubuntu: `sudo apt-get install -y \
             openjdk-17-jre-headless`; elsewhere install any OpenJDK 17 runtime and put its \
             bin/ on PATH. (Or point KOE_TEST_DYNAMODB_ENDPOINT at a DynamoDB Local that is \
             already running.)"
                .to_owned(),
        )
    })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The emulator folder: `$KOE_DYNAMODB_LOCAL_DIR`, else `$KOE_CACHE_DIR/dynamodb-local/emulator`,
/// else `~/.cache/koe/dynamodb-local/emulator` (where `scripts/dynamodb-local.sh fetch` puts
/// it), or what to do.
pub fn emulator_dir() -> Result<PathBuf, StartError> {
    emulator_dir_from(|name| std::env::var_os(name))
}

fn emulator_dir_from(
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<PathBuf, StartError> {
    let non_empty = |name: &str| var(name).filter(|v| !v.is_empty());
    let dir = match non_empty(DIR_VAR) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let cache = match non_empty(CACHE_VAR) {
                Some(cache) => PathBuf::from(cache),
                None => PathBuf::from(non_empty("HOME").unwrap_or_else(|| "/".into()))
                    .join(".cache/koe"),
            };
            cache.join("dynamodb-local/emulator")
        }
    };
    if dir.join("DynamoDBLocal.jar").is_file() && dir.join("DynamoDBLocal_lib").is_dir() {
        return Ok(dir);
    }
    Err(StartError(format!(
        "DynamoDB Local is not in {} (no DynamoDBLocal.jar and DynamoDBLocal_lib/ there). Fetch \
         it with `scripts/dynamodb-local.sh fetch` (npm pack amplify-dynamodb-simulator, about \
         56 MB, into $KOE_CACHE_DIR/dynamodb-local/emulator, default ~/.cache/koe/...), or set \
         {DIR_VAR} to a folder that has them.",
        dir.display()
    )))
}

fn temp_dir(kind: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "koe-dynamodb-local-{kind}-{}-{:08x}",
        std::process::id(),
        fastrand::u32(..)
    ))
}

fn remove_dir(dir: Option<&Path>) {
    if let Some(dir) = dir {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Runs blocking `f` off the async runtime (on its blocking pool), re-raising its panic with the
/// panic's own message.
pub(crate) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(value) => value,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("DynamoDB Local: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pids of the DynamoDB Local JVMs started with `-port <port>`, from `/proc` (one that
    /// has exited, even unreaped, has an empty command line there).
    fn jvms_on(port: u16) -> Vec<u32> {
        let port_arg = format!("\0-port\0{port}\0");
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let cmdline = String::from_utf8_lossy(&cmdline);
            // The java process itself, not its wrapper (`/bin/sh -c ... java ...`).
            let java = cmdline
                .split('\0')
                .next()
                .is_some_and(|arg0| arg0.ends_with("java"));
            if java && cmdline.contains("DynamoDBLocal.jar") && cmdline.contains(&port_arg) {
                pids.push(pid);
            }
        }
        pids
    }

    fn refuses(port: u16) -> bool {
        TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err()
    }

    /// Polls `done` for up to 10 s.
    fn eventually(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "{what}: not within 10 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    async fn table_names(endpoint: &str) -> Vec<String> {
        let client =
            aws_sdk_dynamodb::Client::from_conf(super::super::config_builder(endpoint).build());
        let output = client.list_tables().send().await.expect("ListTables");
        output.table_names().to_vec()
    }

    async fn create_table(endpoint: &str, name: &str) {
        use aws_sdk_dynamodb::types::{
            AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
        };
        let client =
            aws_sdk_dynamodb::Client::from_conf(super::super::config_builder(endpoint).build());
        client
            .create_table()
            .table_name(name)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("k")
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .unwrap(),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("k")
                    .key_type(KeyType::Hash)
                    .build()
                    .unwrap(),
            )
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await
            .expect("CreateTable");
    }

    #[tokio::test]
    async fn on_disk_stops_starts_and_restarts_on_its_port_with_its_data_and_dies_when_dropped() {
        let ddb = DynamoDbLocal::on_disk().await;
        let port = ddb.port();
        assert_eq!(ddb.endpoint, format!("http://127.0.0.1:{port}"));
        assert_eq!(jvms_on(port).len(), 1, "one JVM");
        create_table(&ddb.endpoint, "kept").await;

        ddb.stop().await;
        assert!(!ddb.is_running());
        assert!(refuses(port), "stopped: the port refuses connections");
        assert!(jvms_on(port).is_empty(), "stopped: no JVM");

        ddb.start().await;
        assert!(ddb.is_running());
        assert_eq!(
            table_names(&ddb.endpoint).await,
            ["kept"],
            "the data survived"
        );
        ddb.restart().await;
        assert_eq!(table_names(&ddb.endpoint).await, ["kept"], "and a restart");

        let db_dir = ddb.inner.db_dir.clone().expect("on disk");
        assert!(db_dir.is_dir());
        drop(ddb);
        assert!(jvms_on(port).is_empty(), "dropped: no JVM");
        assert!(refuses(port), "dropped: the port refuses connections");
        assert!(!db_dir.exists(), "dropped: its data removed");
    }

    /// Not a test on its own: `the_jvm_dies_with_the_process_that_started_it` runs this test
    /// binary again with `KOE_TESTKIT_DDB_CHILD=1` to run it, then SIGKILLs it.
    #[test]
    fn child_holding_an_instance() {
        if std::env::var_os("KOE_TESTKIT_DDB_CHILD").is_none() {
            return;
        }
        let ddb = DynamoDbLocal::spawn(Storage::InMemory).unwrap();
        println!("PORT {}", ddb.port());
        std::thread::sleep(Duration::from_secs(120));
    }

    #[test]
    fn the_jvm_dies_with_the_process_that_started_it() {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "dynamodb::local::tests::child_holding_an_instance",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("KOE_TESTKIT_DDB_CHILD", "1")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let port: u16 = stdout
            .lines()
            .map_while(Result::ok)
            .find_map(|line| {
                // After libtest's "test <name> ... " on the same line.
                let (_, port) = line.split_once("PORT ")?;
                Some(port.trim().parse().unwrap())
            })
            .expect("the child says its port");
        assert_eq!(jvms_on(port).len(), 1, "the child's JVM runs");
        assert!(!refuses(port));

        child.kill().unwrap(); // SIGKILL: no destructor, no exit handler runs
        child.wait().unwrap();
        eventually("the JVM of a SIGKILLed process ends", || {
            jvms_on(port).is_empty() && refuses(port)
        });
    }

    /// DynamoDB Local hangs after `Failed to bind`: the attempt must see that, not time out.
    #[test]
    fn a_port_taken_meanwhile_is_seen_at_once_and_its_jvm_killed() {
        let taken = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let inner = Inner {
            port,
            storage: Storage::InMemory,
            java: find_java().unwrap(),
            emulator: emulator_dir().unwrap(),
            db_dir: None,
            running: Mutex::new(None),
        };
        let started = Instant::now();
        assert!(matches!(inner.attempt(), Ok(Attempt::PortTaken)));
        assert!(
            started.elapsed() < START_TIMEOUT / 2,
            "{:?}",
            started.elapsed()
        );
        assert!(jvms_on(port).is_empty());
    }

    #[test]
    fn without_the_emulator_the_error_says_how_to_fetch_it() {
        let empty = std::env::temp_dir();
        let e = emulator_dir_from(|name| (name == DIR_VAR).then(|| empty.clone().into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("scripts/dynamodb-local.sh fetch"), "{e}");
        assert!(e.contains(&empty.display().to_string()), "{e}");

        let e = emulator_dir_from(|name| match name {
            "KOE_CACHE_DIR" => Some("/nonexistent/cache".into()),
            _ => None,
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("/nonexistent/cache/dynamodb-local/emulator"),
            "{e}"
        );
        let e = emulator_dir_from(|name| (name == "HOME").then(|| "/nonexistent/home".into()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/nonexistent/home/.cache/koe/dynamodb-local/emulator"),
            "{e}"
        );
    }

    #[test]
    fn without_java_the_error_says_how_to_get_it() {
        let e = find_java_in(Some("/nonexistent:/also/not".into()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("apt-get install -y openjdk-17-jre-headless"),
            "{e}"
        );
        assert!(find_java_in(None).is_err());
    }
}
