//! Every `events/` fixture through its function's real built binary, under a Lambda Runtime API
//! emulator (`koe_testkit::runtime_api`), with the environment `events/env.json` gives that
//! function (`Parameters` merged with its section) except for what points outside: DynamoDB
//! (testkit's DynamoDB Local, with tables created from `template.yaml`) and OpenAI (the
//! stand-in). The fixtures run in order against one set of tables, so the reservation fixtures
//! see the device `put-device` registered and the call `create-call` reserved.
//!
//! The whole sequence runs twice at once: on today's date, and a year later, the binaries' clock
//! moved a year ahead (`KOE_TEST_CLOCK_OFFSET_DAYS`, which the debug-built binaries' app clock
//! honours; the tests' own clock stays real), so a fixture that goes stale with the date fails
//! here. Their secrets come from a stand-in Secrets Manager, read at each binary's cold start
//! as a deployed function reads them (`events/env.json` names them by ARN). Each pass runs
//! `dispatch-schedule` with nothing due (it must end within a second), then reserves a call due
//! 15 s ahead, whose create must wake a run through the stand-in EventBridge, and runs that
//! wake, `dispatch-schedule` and `dispatch-requested` through the dispatch binary side by side,
//! which must push it exactly once within a second of its second and end soon after (and
//! `dispatch-part`, part 1 of 2 of each minute, which holds none of that small minute);
//! the dispatch route gets a token the stand-in OIDC issuer signed and hands the run to the
//! stand-in EventBridge.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::Credentials;
use chrono::Utc;
use koe_testkit::eventbridge::StandInEventBridge;
use koe_testkit::fixtures::env_json;
use koe_testkit::oidc::StandInIssuer;
use koe_testkit::openai::{Behaviour, StandInOpenAi};
use koe_testkit::runtime_api::{Outcome, RuntimeApi};
use koe_testkit::secretsmanager::StandInSecretsManager;
use koe_testkit::template::repo_root;
use serde_json::Value;

/// How long one invocation (start of the process to its answer) may take; a dispatch run stays
/// until the latest call due in its 70 s window.
const WITHIN: Duration = Duration::from_secs(30);
const RUN_WITHIN: Duration = Duration::from_secs(100);

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
    eventbridge: String,
    oidc: Vec<(&'static str, String)>,
    /// The stand-in Secrets Manager holding every secret `events/env.json` names.
    secretsmanager: String,
    /// The binaries' clock offset in days (`KOE_TEST_CLOCK_OFFSET_DAYS`), or the real clock.
    clock_offset_days: Option<i64>,
}

/// The template function an event of `binary` goes to: the binary's own, except that the
/// dispatch binary serves three (the route's HTTP events, the runs' and the parts' events).
fn function_of(binary: &str, event: &Value) -> String {
    match binary {
        "dispatch" if event.get("requestContext").is_some() => "DispatchRouteFunction".into(),
        "dispatch" if event["detail-type"] == "Koe Dispatch Part" => "DispatchPartFunction".into(),
        _ => logical_id(binary),
    }
}

/// `Parameters` merged with the function's section, then the outside services pointed at the
/// test's, then what the Lambda service itself sets (as `bench/bench.py` does).
fn environment(
    function: &str,
    binary: &str,
    env_json: &BTreeMap<String, BTreeMap<String, String>>,
    runtime_api: &str,
    outside: &Outside,
) -> BTreeMap<String, String> {
    let section = env_json
        .get(function)
        .unwrap_or_else(|| panic!("events/env.json has no section {function}"));
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
    if env.contains_key("DISPATCH_OIDC_JWKS_URL") {
        for (var, value) in &outside.oidc {
            env.insert((*var).into(), value.clone());
        }
    }
    // The bus of requested runs and wakes (an empty name: error notifications are logged).
    if env.get("EVENT_BUS_NAME").is_some_and(|bus| !bus.is_empty()) {
        env.insert(
            "AWS_ENDPOINT_URL_EVENTBRIDGE".into(),
            outside.eventbridge.clone(),
        );
    }
    // The most a deployed stack's `LogLevel` allows, so the logs scanned for personal data
    // below hold everything every crate may write.
    env.insert("RUST_LOG".into(), "trace".into());
    env.insert(
        "AWS_ENDPOINT_URL_SECRETS_MANAGER".into(),
        outside.secretsmanager.clone(),
    );
    if let Some(days) = outside.clock_offset_days {
        env.insert("KOE_TEST_CLOCK_OFFSET_DAYS".into(), days.to_string());
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
        "confirm-call" => env!("CARGO_BIN_EXE_confirm-call"),
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

/// Starts `binary` under a fresh emulator, feeds it `events` one after the other (one process,
/// as one warm Lambda container), and returns the API Gateway v2 response JSON it answered each
/// with; the process is killed afterwards (and on a panic: dropped).
async fn invoke_all(
    binary: &str,
    events: &[&Value],
    within: Duration,
    log_name: &str,
    env: impl Fn(&str) -> BTreeMap<String, String>,
) -> Vec<Value> {
    invoke_all_raw(binary, events, within, log_name, env)
        .await
        .iter()
        .map(Outcome::response_json)
        .collect()
}

/// [`invoke_all`], giving each response as the function posted it (a streamed one is Lambda's
/// prelude, eight NUL bytes and the body as written).
async fn invoke_all_raw(
    binary: &str,
    events: &[&Value],
    within: Duration,
    log_name: &str,
    env: impl Fn(&str) -> BTreeMap<String, String>,
) -> Vec<Outcome> {
    let api = RuntimeApi::start().await;
    let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("fixture-{log_name}.log"));
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
    let mut answers = Vec::new();
    for event in events {
        let outcome = api.invoke(serde_json::to_vec(event).unwrap(), within).await;
        match outcome {
            Outcome::Response { .. } => answers.push(outcome),
            other => panic!(
                "{binary}: {other:?}\nits log ({}):\n{}",
                log.display(),
                std::fs::read_to_string(&log).unwrap_or_default()
            ),
        }
    }
    child.kill().await.unwrap();
    answers
}

/// [`invoke_all`] with one event.
async fn invoke(
    binary: &str,
    event: &Value,
    within: Duration,
    log_name: &str,
    env: impl Fn(&str) -> BTreeMap<String, String>,
) -> Value {
    let mut answers = invoke_all(binary, &[event], within, log_name, env).await;
    answers.remove(0)
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
    let dynamodb = tokio::task::spawn_blocking(koe_testkit::dynamodb::endpoint)
        .await
        .unwrap();
    let issuer = StandInIssuer::start().await;
    let year = chrono::Duration::days(365);
    tokio::join!(
        pass("today", chrono::Duration::zero(), None, &dynamodb, &issuer),
        pass("a year later", year, Some(365), &dynamodb, &issuer),
    );
    eprintln!(
        "every fixture through its binary, today and a year later, in {:?}",
        started.elapsed()
    );
}

/// The whole sequence with the binaries' clock at `offset` from the real one.
async fn pass(
    name: &'static str,
    offset: chrono::Duration,
    clock_offset_days: Option<i64>,
    dynamodb: &str,
    issuer: &StandInIssuer,
) {
    let now = || Utc::now() + offset;
    let env_json = env_json();
    let params = &env_json["Parameters"];

    // The template's tables under a fresh prefix, created with env.json's credentials and region
    // (DynamoDB Local keeps tables per access key and region).
    let client = aws_sdk_dynamodb::Client::from_conf(
        koe_testkit::dynamodb::config_builder(dynamodb)
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
    let eventbridge = StandInEventBridge::start().await;
    // The same stand-in and secrets as `secrets-manager-local` (docs/local.md), on a free port.
    let secrets = StandInSecretsManager::start_with_fixture_secrets("127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind stand-in Secrets Manager");
    let outside = Outside {
        dynamodb: dynamodb.to_owned(),
        tables: BTreeMap::from([
            ("DEVICES_TABLE", tables.devices),
            ("CALLS_TABLE", tables.calls),
            ("AGENT_USAGE_TABLE", tables.usage),
        ]),
        openai: openai.base_url(),
        eventbridge: eventbridge.endpoint(),
        oidc: issuer.vars(),
        secretsmanager: secrets.endpoint(),
        clock_offset_days,
    };
    let logs_prefix = format!("fixture-{}-", name.replace(' ', "-"));
    for entry in std::fs::read_dir(env!("CARGO_TARGET_TMPDIR")).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&logs_prefix)
        {
            std::fs::remove_file(path).unwrap(); // (an earlier run's)
        }
    }
    let invocations = std::sync::atomic::AtomicUsize::new(0);
    let run_within = async |binary: &str, event: &Value, within: Duration, log: &str| {
        let n = invocations.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = format!("{}-{n:02}-{log}", name.replace(' ', "-"));
        let function = function_of(binary, event);
        invoke(binary, event, within, &log, |api| {
            environment(&function, binary, &env_json, api, &outside)
        })
        .await
    };
    let run = async |binary: &str, event: &Value| run_within(binary, event, WITHIN, binary).await;
    let check = |binary: &str, response: &Value, status: u16, needle: &str| {
        check(&format!("{binary} ({name})"), response, status, needle)
    };
    let committed = koe_testkit::fixtures::committed;

    let r = run("put-device", &committed("put-device")).await;
    let body = check(
        "put-device",
        &r,
        status_of("put-device"),
        r#""environment":"sandbox""#,
    );
    // The device secret the registration issued: never in a log either.
    let body: Value = serde_json::from_str(&body).unwrap();
    let device_secret = body["deviceSecret"].as_str().unwrap().to_owned();

    // The generator's event: scheduledAt the next 07:00 in Japan at least an hour from now.
    let create = koe_testkit::fixtures::create_call(now());
    let scheduled_at = scheduled_at_of(&create);
    let r = run("create-call", &create).await;
    check("create-call", &r, status_of("create-call"), &scheduled_at);

    let r = run("get-call", &committed("get-call")).await;
    let got = check("get-call", &r, status_of("get-call"), &scheduled_at);
    assert!(got.contains(r#""callerName":"こえ""#), "get-call: {got}");

    // No push of the reservation has left (and the fixture's callId is not its): 404.
    let r = run("confirm-call", &committed("confirm-call")).await;
    check(
        "confirm-call",
        &r,
        status_of("confirm-call"),
        r#""code":"NOT_FOUND""#,
    );

    let r = run("cancel-call", &committed("cancel-call")).await;
    check("cancel-call", &r, status_of("cancel-call"), "");

    // The schedule with nothing due in its window (the reservation above is the next 07:00,
    // and cancelled): one selection and an exit.
    let (schedule_event, requested_event, part_event, wake_event) = (
        committed("dispatch-schedule"),
        committed("dispatch-requested"),
        committed("dispatch-part"),
        committed("dispatch-wake"),
    );
    let idle = run_within("dispatch", &schedule_event, WITHIN, "dispatch-idle").await;
    assert_eq!(
        (idle["cause"].as_str(), idle["claimed"].as_u64()),
        (Some("schedule"), Some(0))
    );
    assert!(
        idle["durationMs"].as_i64().unwrap() < 1000,
        "{name}: an idle run: {idle}"
    );

    // A call due 15 s from now: its create wakes a run (the bus's stand-in gets the event the
    // rule delivers to the dispatch function). That wake, the schedule and a requested run go
    // through the dispatcher side by side: one of them claims it and pushes it (the logging
    // sender: env.json sets no APNs key), and each ends once it is done, not at its window.
    let tokyo = chrono::FixedOffset::east_opt(9 * 3600).unwrap();
    let due = (now() + chrono::Duration::seconds(15)).with_timezone(&tokyo);
    let create = koe_testkit::fixtures::create_call_at(now(), due);
    let r = run("create-call", &create).await;
    check(
        "create-call",
        &r,
        status_of("create-call"),
        &scheduled_at_of(&create),
    );
    let wakes: Vec<_> = eventbridge
        .entries()
        .into_iter()
        .filter(|e| e.detail_type == wake_event["detail-type"])
        .collect();
    assert_eq!(wakes.len(), 1, "{name}: the create woke one run: {wakes:?}");
    assert_eq!(wakes[0].source, wake_event["source"]);
    assert_eq!(wakes[0].event_bus_name, "koe-local-notifications");
    let mut wake_event = wake_event;
    wake_event["detail"] = wakes[0].detail.clone();
    let runs = async {
        tokio::join!(
            run_within("dispatch", &schedule_event, RUN_WITHIN, "dispatch-schedule"),
            run_within(
                "dispatch",
                &requested_event,
                RUN_WITHIN,
                "dispatch-requested"
            ),
            // Part 1 of 2 of each minute: a minute of one call has one shard, part 0's.
            run_within("dispatch", &part_event, RUN_WITHIN, "dispatch-part"),
            run_within("dispatch", &wake_event, RUN_WITHIN, "dispatch-wake"),
        )
    };
    let others = async {
        // Round 1 of the agent: the (scripted) planner plans one calendar step; round 2 answers
        // it by the id round 1 gave it, and the (scripted) responder answers.
        openai.script([
            Behaviour::complete(
                r#"{"decision":{"type":"plan","steps":[{"tool":"calendar","args":{"from":"2027-01-02T00:00:00+09:00","to":"2027-01-03T00:00:00+09:00"}}]}}"#,
            ),
            Behaviour::complete(r#"{"reply":"明日は歯医者さんだね。","emotion":"happy"}"#),
        ]);
        let r = run("agent", &committed("agent")).await;
        check(
            "agent",
            &r,
            status_of("agent"),
            r#""args":{"from":"2027-01-02T00:00:00+09:00","to":"2027-01-03T00:00:00+09:00"}"#,
        );
        let round2 = koe_testkit::fixtures::agent_round2(&r).unwrap();
        let r = run("agent", &round2).await;
        check(
            "agent round 2",
            &r,
            status_of("agent-round2"),
            r#"{"type":"answer","reply":"明日は歯医者さんだね。","emotion":"happy"}"#,
        );
        let responder = &openai.received()[1].body;
        assert!(
            responder.to_string().contains("歯医者"),
            "round 2's events reach the responder: {responder}"
        );

        let r = run("health", &committed("health")).await;
        check("health", &r, status_of("health"), r#""status":"ok""#);
        let r = run("info", &committed("info")).await;
        check("info", &r, status_of("info"), r#""minimumVersion":"1.0.0""#);
        let r = run("chat", &committed("chat")).await;
        check(
            "chat",
            &r,
            status_of("chat"),
            r#""content":"フィクスチャの返事""#,
        );
        // The streaming function posts its answer in Lambda's streaming form: the metadata
        // prelude (JSON), eight NUL bytes, then the body as it was written (server-sent events).
        let n = invocations.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stream_event = committed("chat-stream");
        let streamed = invoke_all_raw(
            "chat-stream",
            &[&stream_event],
            WITHIN,
            &format!("{}-{n:02}-chat-stream", name.replace(' ', "-")),
            |api| {
                environment(
                    "ChatStreamFunction",
                    "chat-stream",
                    &env_json,
                    api,
                    &outside,
                )
            },
        )
        .await;
        let Some(Outcome::Response { body, .. }) = streamed.into_iter().next() else {
            unreachable!("invoke_all_raw gives responses only")
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
            events.contains("event: done\ndata: {\"message\":{\"role\":\"assistant\",\"content\":\"フィクスチャの返事\"}"),
            "chat-stream: {events}"
        );

        // Three in one warm container: three notifications (logged: env.json sets no bus), the
        // two repeats within the minute marked grouped (not for the chat).
        let error_test = committed("error-test");
        let n = invocations.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = format!("{}-{n:02}-error-test", name.replace(' ', "-"));
        let answers = invoke_all(
            "error-test",
            &[&error_test, &error_test, &error_test],
            WITHIN,
            &log,
            |api| environment("ErrorTestFunction", "error-test", &env_json, api, &outside),
        )
        .await;
        for r in &answers {
            check(
                "error-test",
                r,
                status_of("error-test"),
                r#""code":"TEST_ERROR""#,
            );
        }
        let lines = std::fs::read_to_string(
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("fixture-{log}.log")),
        )
        .unwrap();
        let count = |grouped: bool| {
            lines
                .lines()
                .filter(|l| l.contains(r#""message":"error notification""#))
                .filter(|l| l.contains(&format!(r#""grouped":{grouped}"#)))
                .count()
        };
        assert_eq!(count(false), 1, "{name}: one for the chat: {lines}");
        assert_eq!(count(true), 2, "{name}: two grouped: {lines}");

        // The committed fixture's Bearer token is a placeholder no issuer signed: 401. With a
        // token the stand-in issuer signed (valid on the binary's clock): 202, and the run is
        // handed to EventBridge.
        let r = run("dispatch", &committed("dispatch")).await;
        check(
            "dispatch",
            &r,
            status_of("dispatch"),
            r#""code":"UNAUTHORIZED""#,
        );
        let requested =
            |e: &koe_testkit::eventbridge::PutEntry| e.detail_type != "Koe Dispatch Wake";
        assert!(!eventbridge.entries().iter().any(requested));
        let iat = now().timestamp();
        let token = koe_testkit::oidc::mint(
            &koe_testkit::oidc::claims_with(serde_json::json!({"iat": iat, "exp": iat + 3600})),
            koe_testkit::oidc::TestKey::One,
            Some(koe_testkit::oidc::KID_1),
        );
        let mut signed = committed("dispatch");
        signed["headers"]["authorization"] = Value::String(format!("Bearer {token}"));
        let r = run("dispatch", &signed).await;
        check("dispatch (signed)", &r, 202, r#""status":"accepted""#);
        let entries: Vec<_> = eventbridge
            .entries()
            .into_iter()
            .filter(requested)
            .collect();
        assert_eq!(entries.len(), 1, "{name}: {entries:?}");
        assert_eq!(entries[0].source, "koe.dispatch");
        assert_eq!(entries[0].detail_type, "Koe Dispatch Requested");
        assert_eq!(entries[0].event_bus_name, "koe-local-notifications");
        assert!(entries[0].detail["requestedAt"].is_string());
    };
    let ((schedule, requested, part, wake), ()) = tokio::join!(runs, others);
    // The runs end once the call is done (its second, 15 s ahead), far from their 70 s window;
    // the woken run stays to the end of its gap (at most 76 s), and a part its whole window
    // (the minute's watch holds while every part selects its shards).
    for run in [&schedule, &requested] {
        let ms = run["durationMs"].as_i64().unwrap();
        assert!(ms < 20_000, "{name}: {run}");
    }
    let ms = |run: &Value| run["durationMs"].as_i64().unwrap();
    assert!(ms(&part) >= 60_000, "{name}: {part}");
    assert!((10_000..=77_000).contains(&ms(&wake)), "{name}: {wake}");
    // Every secret env.json names was read from the stand-in Secrets Manager (at the cold start
    // of the binaries that name it), none of them passed as a variable.
    let read = secrets.reads();
    for (function, section) in &env_json {
        for (var, arn) in section
            .iter()
            .filter(|(var, _)| var.ends_with("_SECRET_ARN"))
        {
            assert!(read.contains(arn), "{name}: {function}'s {var} never read");
        }
    }
    assert_eq!(part["cause"], "part", "{name}: {part}");
    for field in ["claimed", "sent", "failed", "missed", "lost"] {
        assert_eq!(
            part[field], 0,
            "{name}: part 1 of 2 has no shard here: {part}"
        );
    }

    let requests = openai.received();
    assert_eq!(
        requests.len(),
        4,
        "planner, responder, chat, streamed chat: {name}"
    );
    assert_eq!(requests[2].body["messages"][0]["content"], "こんにちは");
    assert_eq!(requests[3].body["stream"], true);

    for (event, summary) in [
        ("schedule", &schedule),
        ("request", &requested),
        ("wake", &wake),
    ] {
        assert_eq!(summary["cause"], event, "{name}: {summary}");
        // (`lost`: the other run claimed it first; that is how two runs share a minute.)
        for field in ["failed", "missed"] {
            assert_eq!(summary[field], 0, "{name}: {event}: {summary}");
        }
    }
    let sent = |s: &Value| s["sent"].as_u64().unwrap();
    assert_eq!(
        sent(&schedule) + sent(&requested) + sent(&wake),
        1,
        "{name}: the call due in 15 s is pushed exactly once: {schedule} {requested} {wake}"
    );
    let claimed = |s: &Value| s["claimed"].as_u64().unwrap();
    assert_eq!(
        claimed(&schedule) + claimed(&requested) + claimed(&wake),
        1,
        "{name}"
    );
    assert_no_personal_data(&logs_prefix, name, &[&device_secret]);
    let pushed = [&schedule, &requested, &wake]
        .into_iter()
        .find(|s| sent(s) == 1)
        .unwrap();
    assert!(
        pushed["maxLatenessMs"].as_u64().unwrap() < 1000,
        "{name}: {pushed}"
    );
}

/// What the fixtures carry that the contract keeps out of logs: the device id (logged only as a
/// salted hash), the VoIP token, message contents, calendar titles, the model's replies, the
/// caller name, the agent key, the OpenAI key and the ID tokens.
const PERSONAL: &[&str] = &[
    "6F9619FF-8B86-D011-B42D-00C04FC964FF",
    "6F9619FF",
    "4f1b9c2e7a03d58e6b9f0c1d2e3a4b5c6d7e8f9012a3b4c5d6e7f8091a2b3c4d",
    "4f1b9c2e7a03d58e",
    "明日の予定を教えて",
    "こんにちは",
    "歯医者",
    "母の誕生日",
    "フィクスチャの返事",
    "明日は",
    "こえ",
    "example-agent-key",
    "sk-local",
    "REPLACE-WITH-AN-OIDC-ID-TOKEN",
    "eyJ",
];

/// Scans every log line this pass's binaries wrote (at TRACE) for [`PERSONAL`].
fn assert_no_personal_data(prefix: &str, name: &str, also: &[&str]) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let mut scanned = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        if !file.starts_with(prefix) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        scanned += text.lines().count();
        for needle in PERSONAL.iter().chain(also) {
            let leaks: Vec<&str> = text
                .lines()
                .filter(|l| l.contains(needle))
                .take(3)
                .collect();
            assert!(
                leaks.is_empty(),
                "{name}: {needle:?} reached the log {file}:\n{}",
                leaks.join("\n")
            );
        }
    }
    assert!(
        scanned >= 30,
        "{name}: only {scanned} log lines under {prefix}*"
    );
}

/// `"scheduledAt":"…"` as a generated create-call event's body has it.
fn scheduled_at_of(event: &Value) -> String {
    let body: Value = serde_json::from_str(event["body"].as_str().unwrap()).unwrap();
    format!(r#""scheduledAt":{}"#, body["scheduledAt"])
}

/// The fixture table of docs/local.md (section "Fixtures and local invocation"): fixture name →
/// (function logical id, documented status; `None` for a dispatch run, which answers a summary).
fn documented() -> &'static BTreeMap<String, (String, Option<u16>)> {
    static TABLE: std::sync::LazyLock<BTreeMap<String, (String, Option<u16>)>> =
        std::sync::LazyLock::new(read_documented);
    &TABLE
}

/// The page that documents the fixtures and the commands that invoke them.
const LOCAL_DOC: &str = "docs/local.md";

/// [`documented`], read from [`LOCAL_DOC`] once.
fn read_documented() -> BTreeMap<String, (String, Option<u16>)> {
    let doc = std::fs::read_to_string(repo_root().join(LOCAL_DOC)).unwrap();
    let mut rows = BTreeMap::new();
    for line in doc.lines() {
        let Some(rest) = line.strip_prefix("| `events/") else {
            continue;
        };
        let cells: Vec<&str> = rest.split(" | ").map(str::trim).collect();
        if !cells[0].contains(".json`") || cells.len() < 3 {
            continue; // (a table row about `events/` that is not a fixture's)
        }
        let name = cells[0].split(".json").next().unwrap().to_owned();
        let status = cells[2]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|digits| digits.parse().ok());
        assert!(
            status.is_some() || cells[2].starts_with("run:"),
            "{LOCAL_DOC}: the answer of events/{name}.json starts with its status or `run:`: {line}"
        );
        rows.insert(name, (cells[1].to_owned(), status));
    }
    rows
}

/// The status docs/local.md documents for a fixture.
fn status_of(name: &str) -> u16 {
    documented()[name]
        .1
        .unwrap_or_else(|| panic!("{LOCAL_DOC}: events/{name}.json answers a run summary"))
}

/// docs/local.md's table covers every fixture in `events/`, names the function that fixture is for,
/// and this file runs each; its `sam local invoke` and `cargo lambda invoke` commands use each
/// fixture (or the generator's output for it) with that function.
#[test]
fn the_local_doc_documents_every_fixture_and_the_commands_this_test_runs() {
    let rows = documented();
    let fixtures: Vec<String> = std::fs::read_dir(repo_root().join("events"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter_map(|file| file.strip_suffix(".json").map(str::to_owned))
        .filter(|name| name != "env")
        .collect();
    let this_test = std::fs::read_to_string(file!()).unwrap_or_else(|_| {
        std::fs::read_to_string(repo_root().join("functions/tests/fixtures.rs")).unwrap()
    });
    let env_json = env_json();
    for name in &fixtures {
        let (function, _) = rows.get(name).unwrap_or_else(|| {
            panic!("{LOCAL_DOC}'s fixture table has no row for events/{name}.json")
        });
        assert!(
            env_json.contains_key(function),
            "events/env.json has no section {function}"
        );
        let event = koe_testkit::fixtures::committed(name);
        if let Some(path) = event["rawPath"].as_str() {
            // The streamed chat's event comes from its function URL (not API Gateway).
            let via_function_url = event["requestContext"]["domainName"]
                .as_str()
                .is_some_and(|d| d.contains(".lambda-url."));
            let routes: Vec<_> = if via_function_url {
                koe::routes::STREAMED
                    .iter()
                    .map(|s| s.route.clone())
                    .collect()
            } else {
                koe::ROUTES.to_vec()
            };
            let route = routes
                .iter()
                .find(|r| {
                    r.path == path
                        && Some(r.method.as_str())
                            == event["requestContext"]["http"]["method"].as_str()
                })
                .unwrap_or_else(|| panic!("events/{name}.json: no route for {path}"));
            assert_eq!(route.function, function, "events/{name}.json");
        } else {
            assert_eq!(
                function,
                &function_of("dispatch", &event),
                "events/{name}.json"
            );
        }
        let used = [
            format!("committed(\"{name}\")"),
            format!("fixtures::{}(", name.replace('-', "_")),
        ];
        assert!(
            used.iter().any(|u| this_test.contains(u.as_str())),
            "functions/tests/fixtures.rs does not run events/{name}.json"
        );
    }
    assert_eq!(
        rows.len(),
        fixtures.len(),
        "{LOCAL_DOC}: rows without a fixture"
    );

    // The commands: one per fixture for SAM; for cargo-lambda the HTTP fixtures.
    let doc = std::fs::read_to_string(repo_root().join(LOCAL_DOC)).unwrap();
    let lines: Vec<&str> = doc.lines().collect();
    let mut sam = BTreeMap::new();
    let mut cargo_lambda = BTreeMap::new();
    let mut in_code = false;
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("```") {
            in_code = line.starts_with("```sh");
            continue;
        }
        if !in_code {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(at) = line.find("sam local invoke ") {
            let words: Vec<&str> = line[at..].split_whitespace().collect();
            let (function, source) = (words[3], words[5]);
            assert_eq!(words[4], "-e", "{LOCAL_DOC}: {line}");
            assert!(
                line.contains("--env-vars events/env.json"),
                "{LOCAL_DOC}: {line}"
            );
            let name = match source.strip_prefix("events/") {
                Some(file) => file.trim_end_matches(".json").to_owned(),
                // `-`: the generator's output, piped in on the line before.
                None => generated(lines[i - 1]),
            };
            sam.insert(name, function.to_owned());
        } else if words.first() == Some(&"invoke") && words.len() >= 3 {
            let (binary, file) = (words[1], words[2]);
            let name = match file.strip_prefix("events/") {
                Some(file) => file.trim_end_matches(".json").to_owned(),
                None => {
                    let made = lines[..i]
                        .iter()
                        .rev()
                        .find(|l| l.contains(file) && l.contains("--bin fixture"))
                        .unwrap_or_else(|| panic!("{LOCAL_DOC}: nothing writes {file}"));
                    generated(made)
                }
            };
            cargo_lambda.insert(name, logical_id(binary));
        }
    }
    for name in &fixtures {
        let function = &rows[name].0;
        assert_eq!(
            sam.get(name),
            Some(function),
            "{LOCAL_DOC}: `sam local invoke {function}` with events/{name}.json"
        );
        let http = koe_testkit::fixtures::committed(name)["rawPath"].is_string();
        if http && function != "DispatchRouteFunction" {
            assert_eq!(
                cargo_lambda.get(name),
                Some(function),
                "{LOCAL_DOC}: `invoke` (cargo lambda) with events/{name}.json"
            );
        }
    }
}

/// The fixture a `fixture -- <name>` command line prints.
fn generated(line: &str) -> String {
    let name = line
        .split("--bin fixture -- ")
        .nth(1)
        .unwrap_or_else(|| panic!("{LOCAL_DOC}: expected the generator on {line:?}"))
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    assert!(
        koe_testkit::fixtures::GENERATED.contains(&name.as_str()),
        "{name}"
    );
    name
}
