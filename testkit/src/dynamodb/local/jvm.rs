//! Starting, probing and killing the JVM: one start attempt, a stop, a start again on the same port.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

impl Inner {
    /// Starts the JVM on `self.port` and waits until it answers.
    pub(super) fn attempt(&self) -> Result<Attempt, StartError> {
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

    pub(super) fn stop(&self) {
        if let Some(mut jvm) = self.running.lock().unwrap().take() {
            jvm.kill();
        }
    }

    /// Starts it on its port again, waiting out someone else holding the port for a while.
    pub(super) fn start_again(&self) -> Result<(), StartError> {
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
    pub(super) fn kill(&mut self) {
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
