//! DynamoDB Local's own tests: stop, start, restart, dying with its process, and its errors.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Instant;

use super::host::{emulator_dir_from, find_java_in};
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
    // `PortTaken`, not the timeout's error: the attempt saw `Failed to bind` (how soon is the
    // machine's, not asserted).
    assert!(matches!(inner.attempt(), Ok(Attempt::PortTaken)));
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
