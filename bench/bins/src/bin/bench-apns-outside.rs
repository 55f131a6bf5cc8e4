//! Issue 58's scenario through the built koe-local (`bench/apns-outside.sh` runs it five times
//! on each store): its own dispatcher with the four `APNS_*` values and `APNS_ENDPOINT` pointed
//! at the strict APNs stand-in set as the outside server was (`StrictSettings::outside`: 150 ms
//! answers, a stream limit of 1 right after each 410 until the next 200, one graceful GOAWAY on
//! the 30th push taken, after which it reads nothing more and closes 1.15 s later,
//! `ENHANCE_YOUR_CALM` past an acknowledged limit). `--devices` devices (80), every
//! `--dead-every`th token dead (20), each with a call due in one second, created over HTTP
//! `--ahead` seconds before it (25); 25 s after the second, each call's status from GET /calls
//! beside what the server received.
//!
//! ```sh
//! bench-apns-outside --koe-local target/release/koe-local --store memory|dynamodb
//!     [--devices 80] [--dead-every 20] [--go-away-at 30] [--ahead 25]
//! ```
//!
//! `--store dynamodb` uses the DynamoDB Local `KOE_TEST_DYNAMODB_ENDPOINT` names (fresh tables).
//! Prints one `RESULT key=value ...` line on stdout, and each wrong call on stderr.

use std::collections::BTreeMap;
use std::process::{ExitCode, Stdio};

use chrono::{DateTime, FixedOffset, Utc};
use koe_testkit::push::strict::{StrictApns, StrictSettings};
use serde_json::{Value, json};

const USAGE: &str = "bench-apns-outside --koe-local PATH --store memory|dynamodb [--devices N] \
                     [--dead-every N] [--go-away-at N] [--ahead SECS]";
const API_KEY: &str = "local-dev-key";
/// How long after the second the calls are looked at (the issue's look).
const LOOK_AFTER: chrono::Duration = chrono::Duration::seconds(25);
const TEST_P8: &str = include_str!("../../../../testkit/keys/apns-test.p8");

struct Options {
    koe_local: String,
    dynamodb: bool,
    devices: usize,
    dead_every: usize,
    go_away_at: u64,
    ahead: i64,
}

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        koe_local: String::new(),
        dynamodb: false,
        devices: 80,
        dead_every: 20,
        go_away_at: 30,
        ahead: 25,
    };
    let number = |flag: &str, value: &str| -> Result<u64, String> {
        value.parse().map_err(|_| format!("{flag}: not a number"))
    };
    for (flag, value) in koe_bench::flag_pairs()? {
        match flag.as_str() {
            "--koe-local" => options.koe_local = value,
            "--store" if value == "memory" || value == "dynamodb" => {
                options.dynamodb = value == "dynamodb"
            }
            "--devices" => options.devices = number(&flag, &value)? as usize,
            "--dead-every" => options.dead_every = number(&flag, &value)? as usize,
            "--go-away-at" => options.go_away_at = number(&flag, &value)?,
            "--ahead" => options.ahead = number(&flag, &value)? as i64,
            _ => return Err(format!("bad option {flag} {value}")),
        }
    }
    if options.koe_local.is_empty() || options.devices == 0 || options.dead_every == 0 {
        return Err("--koe-local is required, --devices and --dead-every ≥ 1".into());
    }
    Ok(options)
}

/// One device's call as the bench made it.
struct Made {
    device: String,
    secret: Option<String>,
    call_id: String,
    dead: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let Some(options) = koe_bench::parsed(parse_args(), "bench-apns-outside", Some(USAGE)) else {
        return ExitCode::from(2);
    };
    let apns = StrictApns::start(StrictSettings::outside()).await;
    apns.go_away_after(options.go_away_at);
    let endpoint = format!("http://{}", apns.addr);
    let (chat, agent) = (koe_bench::free_addr(), koe_bench::free_addr());
    let mut env: Vec<(String, String)> = [
        ("CHAT_ADDR", chat.as_str()),
        ("AGENT_ADDR", agent.as_str()),
        ("RUST_LOG", "warn"),
        ("APNS_KEY_P8", TEST_P8),
        ("APNS_KEY_ID", "ABCDE12345"),
        ("APNS_TEAM_ID", "TEAM123456"),
        ("APNS_BUNDLE_ID", "com.example.koe"),
        ("APNS_ENDPOINT", endpoint.as_str()),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .into();
    if options.dynamodb {
        let (upstream, tables) = koe_bench::fresh_tables("outside").await;
        let key = koe_testkit::dynamodb::ACCESS_KEY;
        for (k, v) in [
            ("STORE", "dynamodb"),
            ("AWS_ENDPOINT_URL_DYNAMODB", upstream.as_str()),
            ("AWS_REGION", koe_testkit::dynamodb::REGION),
            ("AWS_ACCESS_KEY_ID", key),
            ("AWS_SECRET_ACCESS_KEY", key),
            ("DEVICES_TABLE", tables.devices.as_str()),
            ("CALLS_TABLE", tables.calls.as_str()),
            ("AGENT_USAGE_TABLE", tables.usage.as_str()),
        ] {
            env.push((k.to_owned(), v.to_owned()));
        }
    }
    let mut child = std::process::Command::new(&options.koe_local)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", options.koe_local));
    let base = format!("http://{agent}");
    let http = reqwest::Client::new();
    if !koe_bench::started(&http, &chat).await {
        eprintln!("koe-local did not start");
        let _ = child.kill();
        let _ = child.wait();
        return ExitCode::FAILURE;
    }

    let second = DateTime::from_timestamp(Utc::now().timestamp() + options.ahead, 0).unwrap();
    let at = second
        .with_timezone(&FixedOffset::east_opt(9 * 3600).unwrap())
        .to_rfc3339();
    let mut made = Vec::new();
    for i in 0..options.devices {
        let (device, token) = (format!("OUTSIDE-{i:04}"), format!("{i:064x}"));
        let dead = i % options.dead_every == options.dead_every - 1;
        if dead {
            apns.unregister(&token);
        }
        let put = json!({"deviceId": device, "voipToken": token});
        let put: Value = http
            .put(format!("{base}/devices"))
            .header("x-api-key", API_KEY)
            .json(&put)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap_or_default();
        let secret = put["deviceSecret"].as_str().map(str::to_owned);
        let mut post = http
            .post(format!("{base}/calls"))
            .header("x-api-key", API_KEY)
            .json(&json!({"deviceId": device, "scheduledAt": at}));
        if let Some(secret) = &secret {
            post = post.header("x-device-secret", secret);
        }
        let created = post.send().await.unwrap();
        assert_eq!(created.status(), 201, "POST /calls for {device}");
        let created: Value = created.json().await.unwrap();
        let call_id = created["callId"].as_str().unwrap().to_owned();
        made.push(Made {
            device,
            secret,
            call_id,
            dead,
        });
    }
    let ahead = (second - Utc::now()).num_milliseconds();

    let look = second + LOOK_AFTER;
    tokio::time::sleep((look - Utc::now()).to_std().unwrap_or_default()).await;
    let mut statuses = BTreeMap::<String, usize>::new();
    let (mut once, mut twice, mut never_received_recorded_bad, mut wrong) = (0, 0, 0, 0);
    let seen = apns.seen();
    let mut lateness = Vec::new();
    for call in &made {
        let mut get = http
            .get(format!("{base}/calls?deviceId={}", call.device))
            .header("x-api-key", API_KEY);
        if let Some(secret) = &call.secret {
            get = get.header("x-device-secret", secret);
        }
        let got: Value = get.send().await.unwrap().json().await.unwrap_or_default();
        let status = got["status"].as_str().unwrap_or("gone").to_owned();
        *statuses.entry(status.clone()).or_default() += 1;
        let received = apns.processed(&call.call_id);
        let arrivals = seen
            .iter()
            .filter(|s| s.call_id == call.call_id && s.fate.processed());
        lateness.extend(arrivals.map(|s| (s.at - second).num_milliseconds()));
        let expected = if call.dead { "failed" } else { "sent" };
        match received {
            1 => once += usize::from(!call.dead),
            0 => {}
            _ => twice += 1,
        }
        if received == 0 && matches!(status.as_str(), "failed" | "missed" | "claimed") {
            never_received_recorded_bad += 1;
        }
        if received != 1 || status != expected {
            wrong += 1;
            eprintln!(
                "wrong: {} {} received {received}, recorded {status}",
                call.device, call.call_id
            );
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    lateness.sort_unstable();
    let p99 = lateness
        .get((lateness.len() * 99).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or(-1);
    let live = made.iter().filter(|c| !c.dead).count();
    let statuses: Vec<String> = statuses.iter().map(|(s, n)| format!("{s}:{n}")).collect();
    println!(
        "RESULT store={} devices={} live={live} live_once={once} twice={twice} \
         never_received_recorded_bad={never_received_recorded_bad} wrong={wrong} p99_ms={p99} \
         max_ms={} go_aways={} refused={} connections={} client_resets={} statuses={} \
         created_ahead_ms={ahead}",
        if options.dynamodb {
            "dynamodb"
        } else {
            "memory"
        },
        made.len(),
        lateness.last().copied().unwrap_or(-1),
        apns.go_aways(),
        apns.refused(),
        apns.connections(),
        apns.client_resets(),
        statuses.join(","),
    );
    if wrong == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
