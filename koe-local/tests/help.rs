//! The `koe-local` binary as a new user first runs it: `--help` (and `-h`) prints every setting
//! its configuration reads, one line each with its default, and exits 0 without serving; any
//! other argument is refused. With no settings at all it warns at start-up that the built-in
//! model answers, and POST /api/chat answers 200 from it.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use koe::platform::config::{ApnsPoolConfig, AwsConfig, Config, LogConfig, PushSenderChoice, Vars};
use koe_local::LocalConfig;
use koe_local::model::{HEADER, HEADER_VALUE, MARKER};

fn koe_local() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_koe-local"));
    command.env_clear();
    command
}

/// Every variable koe-local's configuration looks up (the sections `main` checks at start-up).
fn variables_read() -> BTreeSet<String> {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let recorder = seen.clone();
    let vars = Vars::from_fn(move |name| {
        recorder.lock().unwrap().insert(name.to_owned());
        None
    });
    let _ = Config::from_vars(&vars);
    let _ = LogConfig::from_vars(&vars);
    let _ = AwsConfig::from_vars(&vars);
    let _ = ApnsPoolConfig::from_vars(&vars);
    let _ = PushSenderChoice::from_vars(&vars);
    let _ = LocalConfig::from_vars(&vars);
    let read = seen.lock().unwrap().clone();
    read.into_iter()
        .filter(|v| !v.ends_with("_SECRET_ARN"))
        .collect()
}

#[test]
fn help_prints_every_setting_with_its_default_and_exits_0() {
    let read = variables_read();
    assert!(
        read.len() > 30,
        "the configuration reads its variables: {read:?}"
    );
    for flag in ["--help", "-h"] {
        let out = koe_local().arg(flag).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{flag}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(text, koe_local::help::text(), "{flag}");
        assert!(!text.contains("koe-local listening"), "it does not serve");
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("  ")).collect();
        for var in &read {
            let of: Vec<&&str> = lines
                .iter()
                .filter(|l| l.split_whitespace().next() == Some(var))
                .collect();
            assert_eq!(of.len(), 1, "{flag}: one line for {var} in\n{text}");
            // Name, default (`-`: none), meaning.
            assert!(of[0].split_whitespace().count() >= 3, "{}", of[0]);
        }
        let line = |var: &str| {
            let found = lines
                .iter()
                .find(|l| l.split_whitespace().next() == Some(var));
            found.map(|l| l.split_whitespace().nth(1).unwrap_or_default().to_owned())
        };
        assert_eq!(line("CHAT_ADDR").as_deref(), Some("127.0.0.1:3000"));
        assert_eq!(line("AGENT_ADDR").as_deref(), Some("127.0.0.1:3001"));
        assert_eq!(line("STORE").as_deref(), Some("memory"));
        assert_eq!(line("PUSH_SENDER").as_deref(), Some("apns"));
        assert_eq!(line("OPENAI_API_KEY").as_deref(), Some("unset"));
        assert!(text.contains(MARKER), "the model is named");
    }
}

#[test]
fn another_argument_is_refused() {
    let out = koe_local().arg("--port=3000").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let message = String::from_utf8(out.stderr).unwrap();
    assert!(
        message.contains("--port=3000") && message.contains("--help"),
        "{message}"
    );
}

/// The child, killed when the test ends however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn with_no_settings_it_warns_and_chat_answers_from_the_builtin_model() {
    let child = koe_local()
        .envs([
            ("CHAT_ADDR", "127.0.0.1:0"),
            ("AGENT_ADDR", "127.0.0.1:0"),
            ("LOCAL_DISPATCHER", "false"),
            ("METRICS", "off"),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut running = Running(child);
    let stdout = running.0.stdout.take().unwrap();
    // Its log lines until it listens (a blocking read, off the runtime).
    let lines = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = serde_json::from_str::<serde_json::Value>(&line.unwrap()) else {
                continue;
            };
            let listening = line["message"] == "koe-local listening";
            lines.push(line);
            if listening {
                break;
            }
        }
        lines
    });
    let lines = tokio::time::timeout(std::time::Duration::from_secs(60), lines)
        .await
        .expect("koe-local listens")
        .unwrap();
    let warning = lines
        .iter()
        .find(|l| l["level"] == "WARN" && l["message"].as_str().unwrap().contains(MARKER));
    assert!(warning.is_some(), "a start-up warning in {lines:?}");
    let listening = lines.last().unwrap();
    assert_eq!(listening["message"], "koe-local listening", "{lines:?}");
    let chat = listening["chat_addr"].as_str().unwrap();
    let response = reqwest::Client::new()
        .post(format!("http://{chat}/api/chat"))
        .header("content-type", "application/json")
        .body(r#"{"messages":[{"role":"user","content":"hi"}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()[HEADER], HEADER_VALUE);
    let body: serde_json::Value = response.json().await.unwrap();
    let content = body["message"]["content"].as_str().unwrap();
    assert!(content.starts_with(MARKER), "{body}");
}
