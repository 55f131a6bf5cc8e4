//! Every `events/` fixture through its function's real built binary, under a Lambda Runtime API
//! emulator (`koe_testkit::runtime_api`), with the environment `events/env.json` gives that
//! function (`Parameters` merged with its section) except for what points outside: DynamoDB
//! (testkit's DynamoDB Local, with tables created from `template.yaml`) and OpenAI (the
//! stand-in). The fixtures run in order against one set of tables, so the reservation fixtures
//! see the device `put-device` registered and the call `create-call` reserved.
//!
//! Not run here: `events/dispatch-schedule.json` (its run lasts the dispatcher's 70 s window by
//! design) and `events/dispatch-requested.json` (covered in-process by `dispatch_lambda.rs`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::Credentials;
use koe_testkit::openai::{Behaviour, StandInOpenAi};
use koe_testkit::runtime_api::{Outcome, RuntimeApi};
use koe_testkit::template::repo_root;
use serde_json::Value;

/// How long one invocation (start of the process to its answer) may take.
const WITHIN: Duration = Duration::from_secs(30);

/// `events/env.json`, as `sam local invoke --env-vars` reads it.
fn env_json() -> BTreeMap<String, BTreeMap<String, String>> {
    let text = std::fs::read_to_string(repo_root().join("events/env.json")).unwrap();
    serde_json::from_str(&text).expect("events/env.json: sections of string variables")
}

/// The template's logical id of a binary's function: `put-device` → `PutDeviceFunction`.
fn logical_id(binary: &str) -> String {
    let mut id: String = binary
        .split('-')
        .map(|word| {
            let mut chars = word.chars();
            let first = chars.next().expect("no empty words").to_ascii_uppercase();
            std::iter::once(first).chain(chars).collect::<String>()
        })
        .collect();
    id.push_str("Function");
    id
}

/// What the test overrides in every function's environment.
struct Outside {
    dynamodb: String,
    tables: BTreeMap<&'static str, String>,
    openai: String,
}

/// `Parameters` merged with the function's section, then the outside services pointed at the
/// test's, then what the Lambda service itself sets (as `bench/bench.py` does).
fn environment(
    binary: &str,
    env_json: &BTreeMap<String, BTreeMap<String, String>>,
    runtime_api: &str,
    outside: &Outside,
) -> BTreeMap<String, String> {
    let section = env_json
        .get(&logical_id(binary))
        .unwrap_or_else(|| panic!("events/env.json has no section {}", logical_id(binary)));
    let mut env = env_json["Parameters"].clone();
    env.extend(section.clone());
    env.insert("AWS_ENDPOINT_URL_DYNAMODB".into(), outside.dynamodb.clone());
    for (var, table) in &outside.tables {
        if env.contains_key(*var) {
            env.insert((*var).into(), table.clone());
        }
    }
    if env.contains_key("OPENAI_BASE_URL") {
        env.insert("OPENAI_BASE_URL".into(), outside.openai.clone());
    }
    let region = env["AWS_REGION"].clone();
    for (key, value) in [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("AWS_LAMBDA_RUNTIME_API", runtime_api.to_owned()),
        ("AWS_LAMBDA_FUNCTION_NAME", format!("koe-test-{binary}")),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".into()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128".into()),
        (
            "AWS_LAMBDA_LOG_GROUP_NAME",
            format!("/aws/lambda/koe-test-{binary}"),
        ),
        (
            "AWS_LAMBDA_LOG_STREAM_NAME",
            "2026/01/01/[$LATEST]0123456789abcdef".into(),
        ),
        ("AWS_LAMBDA_INITIALIZATION_TYPE", "on-demand".into()),
        ("AWS_DEFAULT_REGION", region),
    ] {
        env.insert(key.into(), value);
    }
    env
}

/// The built binary of a function (cargo builds every bin of this package for its tests).
fn binary_path(binary: &str) -> PathBuf {
    PathBuf::from(match binary {
        "put-device" => env!("CARGO_BIN_EXE_put-device"),
        "create-call" => env!("CARGO_BIN_EXE_create-call"),
        "get-call" => env!("CARGO_BIN_EXE_get-call"),
        "cancel-call" => env!("CARGO_BIN_EXE_cancel-call"),
        "agent" => env!("CARGO_BIN_EXE_agent"),
        "health" => env!("CARGO_BIN_EXE_health"),
        "info" => env!("CARGO_BIN_EXE_info"),
        "chat" => env!("CARGO_BIN_EXE_chat"),
        "chat-stream" => env!("CARGO_BIN_EXE_chat-stream"),
        "error-test" => env!("CARGO_BIN_EXE_error-test"),
        "dispatch" => env!("CARGO_BIN_EXE_dispatch"),
        other => panic!("no binary {other}"),
    })
}

/// Starts `binary` under a fresh emulator, feeds it `event`, and returns the API Gateway v2
/// response JSON it answered with; the process is killed afterwards (and on a panic: dropped).
async fn invoke(
    binary: &str,
    event: &Value,
    env: impl Fn(&str) -> BTreeMap<String, String>,
) -> Value {
    invoke_raw(binary, event, env).await.response_json()
}

/// `invoke`, giving the response body as the function posted it.
async fn invoke_raw(
    binary: &str,
    event: &Value,
    env: impl Fn(&str) -> BTreeMap<String, String>,
) -> Outcome {
    let api = RuntimeApi::start().await;
    let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("fixture-{binary}.log"));
    let log_file = std::fs::File::create(&log).unwrap();
    let mut child = tokio::process::Command::new(binary_path(binary))
        .env_clear()
        .envs(env(&api.address()))
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("start {binary}: {e}"));
    let outcome = api.invoke(serde_json::to_vec(event).unwrap(), WITHIN).await;
    child.kill().await.unwrap();
    match outcome {
        Outcome::Response { .. } => outcome,
        other => panic!(
            "{binary}: {other:?}\nits log ({}):\n{}",
            log.display(),
            std::fs::read_to_string(&log).unwrap_or_default()
        ),
    }
}

/// Asserts the answer's status and that its body (JSON) contains `needle`; returns the body.
fn check(binary: &str, response: &Value, status: u16, needle: &str) -> String {
    assert_eq!(response["statusCode"], status, "{binary}: {response}");
    assert_ne!(response["isBase64Encoded"], true, "{binary}: {response}");
    let body = response["body"].as_str().unwrap_or_default().to_owned();
    if needle.is_empty() {
        assert!(body.is_empty(), "{binary}: {body}");
    } else {
        assert!(body.contains(needle), "{binary}: {body}");
        serde_json::from_str::<Value>(&body)
            .unwrap_or_else(|e| panic!("{binary}: body is not JSON ({e}): {body}"));
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_passes_through_its_built_binary() {
    let started = Instant::now();
    let env_json = env_json();
    let params = &env_json["Parameters"];

    // DynamoDB Local, with the template's tables under a fresh prefix, created with env.json's
    // credentials and region (DynamoDB Local keeps tables per access key and region).
    let dynamodb = tokio::task::spawn_blocking(koe_testkit::dynamodb::endpoint)
        .await
        .unwrap();
    let client = aws_sdk_dynamodb::Client::from_conf(
        koe_testkit::dynamodb::config_builder(&dynamodb)
            .region(aws_sdk_dynamodb::config::Region::new(
                params["AWS_REGION"].clone(),
            ))
            .credentials_provider(Credentials::new(
                &params["AWS_ACCESS_KEY_ID"],
                &params["AWS_SECRET_ACCESS_KEY"],
                None,
                None,
                "events/env.json",
            ))
            .build(),
    );
    let prefix = format!("koe-local-{}", koe_testkit::dynamodb::random_prefix());
    let tables = koe_testkit::dynamodb::create_tables(&client, &prefix).await;

    let openai = StandInOpenAi::start().await;
    openai.set_default(Behaviour::complete("フィクスチャの返事"));
    let outside = Outside {
        dynamodb,
        tables: BTreeMap::from([
            ("DEVICES_TABLE", tables.devices),
            ("CALLS_TABLE", tables.calls),
            ("AGENT_USAGE_TABLE", tables.usage),
        ]),
        openai: openai.base_url(),
    };
    let run = async |binary: &str, event: &Value| {
        invoke(binary, event, |api| {
            environment(binary, &env_json, api, &outside)
        })
        .await
    };
    let committed = koe_testkit::fixtures::committed;

    let r = run("put-device", &committed("put-device")).await;
    check("put-device", &r, 200, r#""environment":"sandbox""#);

    // The generator's event: scheduledAt the next 07:00 in Japan at least an hour from now.
    let create = koe_testkit::fixtures::create_call(chrono::Utc::now());
    let body: Value = serde_json::from_str(create["body"].as_str().unwrap()).unwrap();
    let scheduled_at = format!(r#""scheduledAt":{}"#, body["scheduledAt"]);
    let r = run("create-call", &create).await;
    check("create-call", &r, 201, &scheduled_at);

    let r = run("get-call", &committed("get-call")).await;
    let got = check("get-call", &r, 200, &scheduled_at);
    assert!(got.contains(r#""callerName":"こえ""#), "get-call: {got}");

    let r = run("cancel-call", &committed("cancel-call")).await;
    check("cancel-call", &r, 204, "");

    // Round 1 of the agent: the (scripted) planner plans one calendar step.
    openai.script([Behaviour::complete(
        r#"{"decision":{"type":"plan","steps":[{"tool":"calendar","args":{"from":"2027-01-02T00:00:00+09:00","to":"2027-01-03T00:00:00+09:00"}}]}}"#,
    )]);
    let r = run("agent", &committed("agent")).await;
    check(
        "agent",
        &r,
        200,
        r#""steps":[{"id":"s1","tool":"calendar","args":{"from":"2027-01-02T00:00:00+09:00","to":"2027-01-03T00:00:00+09:00"}}]"#,
    );

    let r = run("health", &committed("health")).await;
    check("health", &r, 200, r#""status":"ok""#);
    let r = run("info", &committed("info")).await;
    check("info", &r, 200, r#""minimumVersion":"1.0.0""#);
    let r = run("chat", &committed("chat")).await;
    check("chat", &r, 200, r#""content":"フィクスチャの返事""#);
    // The streaming function posts its answer in Lambda's streaming form: the metadata prelude
    // (JSON), eight NUL bytes, then the body as it was written (the server-sent events).
    let streamed = invoke_raw("chat-stream", &committed("chat-stream"), |api| {
        environment("chat-stream", &env_json, api, &outside)
    })
    .await;
    let Outcome::Response { body, .. } = streamed else {
        unreachable!("invoke_raw gives responses only")
    };
    let split = body
        .windows(8)
        .position(|w| w == [0u8; 8])
        .unwrap_or_else(|| panic!("chat-stream: no prelude separator in {body:?}"));
    let prelude: Value = serde_json::from_slice(&body[..split]).unwrap();
    assert_eq!(prelude["statusCode"], 200, "chat-stream: {prelude}");
    assert_eq!(prelude["headers"]["content-type"], "text/event-stream");
    let events = std::str::from_utf8(&body[split + 8..]).unwrap();
    assert!(
        // The stand-in writes one token per Japanese character.
        events.starts_with("event: delta\ndata: {\"text\":\"フ\"}\n\n"),
        "chat-stream: {events}"
    );
    assert!(
        events.ends_with(
            "event: done\ndata: {\"message\":{\"role\":\"assistant\",\"content\":\"フィクスチャの返事\"},\"tokensUsed\":57,\"usage\":{\"promptTokens\":40,\"completionTokens\":17,\"totalTokens\":57}}\n\n"
        ),
        "chat-stream: {events}"
    );
    let r = run("error-test", &committed("error-test")).await;
    check("error-test", &r, 500, r#""code":"TEST_ERROR""#);
    // The fixture's Bearer token is a placeholder no issuer signed: 401.
    let r = run("dispatch", &committed("dispatch")).await;
    check("dispatch", &r, 401, r#""code":"UNAUTHORIZED""#);

    let requests = openai.received();
    assert_eq!(
        requests.len(),
        3,
        "the agent's planner, the chat, the streamed chat"
    );
    assert_eq!(requests[1].body["messages"][0]["content"], "こんにちは");
    assert_eq!(requests[2].body["stream"], true);
    eprintln!(
        "11 fixtures through their binaries in {:?}",
        started.elapsed()
    );
}
