//! The 07:00 spike through the real path (`bench/spike-local.sh` runs it): the built koe-local
//! (`STORE=dynamodb`, its own dispatcher, the logging push sender) on DynamoDB Local through the
//! real SDK, `--calls` devices registered and their calls created over HTTP `--ahead` seconds
//! before one shared second, then each push's time read from koe-local's own log line
//! (`voip push (logged, not sent)`, `sentAt`) and each call's final status from GET /calls.
//!
//! ```sh
//! bench-spike-local --koe-local target/release/koe-local --calls 200 [--ahead 75]
//!     [--second-of-minute S] [--limits off|scaled] [--timeline PATH]
//! ```
//!
//! `--limits scaled` puts the limits proxy (testkit's model of DynamoDB's per-partition and
//! per-table limits, `KOE_LIMITS_SCALE` times each figure, default 0.05: 1:20) between koe-local
//! and DynamoDB Local, and tells koe-local's dispatcher the scaled table's throughput
//! (`DISPATCH_WRITE_BUDGET`). `--second-of-minute` places the second in its minute (14 with
//! `--ahead 75`: the creates straddle a minute's end, so a woken run and the minute's run share
//! the calls). `KOE_BENCH_LOG` names a file that gets koe-local's log. `KOE_TEST_DYNAMODB_ENDPOINT` names the DynamoDB Local to use (fresh
//! tables each run). `--timeline` gets one line per DynamoDB request koe-local made around the
//! second (operation, sent and answered in ms from the second, HTTP status), through a timing
//! proxy of this binary's: the request timeline of one such second. Prints one
//! `RESULT key=value ...` line on stdout.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, FixedOffset, Utc};
use koe_testkit::dynamodb::limits::{Limits, LimitsModel};
use koe_testkit::dynamodb::limits_proxy::LimitsProxy;
use serde_json::{Value, json};

const USAGE: &str = "bench-spike-local --koe-local PATH --calls N [--ahead SECS] \
                     [--second-of-minute S] [--limits off|scaled] [--timeline PATH]";
/// Requests in flight while devices and calls are made (a crowd of phones, not one client).
const SETUP_CONCURRENCY: usize = 32;
/// How long after the second the bench keeps reading koe-local's log (a push again or a
/// duplicate would show by then: the claim timeout is 30 s, grace 120 s).
const WATCH_AFTER: Duration = Duration::from_secs(40);
const API_KEY: &str = "local-dev-key";

struct Options {
    koe_local: String,
    calls: usize,
    ahead: i64,
    limits: bool,
    timeline: Option<String>,
    /// The due second's place in its minute (`None`: whatever `ahead` gives).
    second_of_minute: Option<i64>,
}

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        koe_local: String::new(),
        calls: 200,
        ahead: 75,
        limits: false,
        timeline: None,
        second_of_minute: None,
    };
    for (flag, value) in koe_bench::flag_pairs()? {
        match flag.as_str() {
            "--koe-local" => options.koe_local = value,
            "--calls" => options.calls = value.parse().map_err(|_| "--calls: not a number")?,
            "--ahead" => options.ahead = value.parse().map_err(|_| "--ahead: not a number")?,
            "--limits" if value == "off" || value == "scaled" => options.limits = value == "scaled",
            "--timeline" => options.timeline = Some(value),
            "--second-of-minute" => {
                let s = value
                    .parse()
                    .map_err(|_| "--second-of-minute: not a number")?;
                options.second_of_minute = Some(s).filter(|s| (0..60).contains(s));
            }
            _ => return Err(format!("bad option {flag} {value}")),
        }
    }
    if options.koe_local.is_empty() || options.calls == 0 || options.ahead < 15 {
        return Err("--koe-local is required, --calls ≥ 1, --ahead ≥ 15".into());
    }
    Ok(options)
}

/// One DynamoDB request koe-local made, as the timing proxy saw it.
struct Timed {
    operation: String,
    sent: DateTime<Utc>,
    answered: DateTime<Utc>,
    status: u16,
}

/// A pass-through proxy that records when each request came and when its answer went back.
struct TimingProxy {
    url: String,
    log: Arc<Mutex<Vec<Timed>>>,
}

async fn timing_proxy(upstream: String) -> TimingProxy {
    use http_body_util::{BodyExt, Full};
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let log = Arc::new(Mutex::new(Vec::new()));
    let client = reqwest::Client::new();
    let recorded = log.clone();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            let (client, upstream, log) = (client.clone(), upstream.clone(), recorded.clone());
            tokio::spawn(async move {
                let serve = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let (client, upstream, log) = (client.clone(), upstream.clone(), log.clone());
                    async move {
                        let sent = Utc::now();
                        let (parts, body) = request.into_parts();
                        let body = body.collect().await?.to_bytes();
                        let operation = parts
                            .headers
                            .get("x-amz-target")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|t| t.rsplit('.').next())
                            .unwrap_or_default()
                            .to_owned();
                        let mut forward = client.post(format!("{upstream}{}", parts.uri.path()));
                        for (name, value) in &parts.headers {
                            if name != http::header::HOST && name != http::header::CONTENT_LENGTH {
                                forward = forward.header(name.as_str(), value.as_bytes());
                            }
                        }
                        let answer = forward.body(body).send().await;
                        let (status, headers, bytes) = match answer {
                            Ok(a) => {
                                let status = a.status().as_u16();
                                let headers = a.headers().clone();
                                (status, headers, a.bytes().await.unwrap_or_default())
                            }
                            Err(_) => (502, http::HeaderMap::new(), bytes::Bytes::new()),
                        };
                        log.lock().unwrap().push(Timed {
                            operation,
                            sent,
                            answered: Utc::now(),
                            status,
                        });
                        let mut response = hyper::Response::builder().status(status);
                        for (name, value) in &headers {
                            if name != http::header::CONTENT_LENGTH
                                && name != http::header::TRANSFER_ENCODING
                            {
                                response = response.header(name, value);
                            }
                        }
                        Ok::<_, hyper::Error>(response.body(Full::new(bytes)).unwrap())
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(socket), serve)
                    .await;
            });
        }
    });
    TimingProxy { url, log }
}

/// What koe-local's log said: each push's `sentAt` per call id, and its runs' reports.
#[derive(Default)]
struct Seen {
    pushes: HashMap<String, Vec<DateTime<Utc>>>,
    runs: Vec<Value>,
    errors: usize,
}

/// A log line's field, whether tracing's JSON put it under `fields` or at the top.
fn field<'a>(line: &'a Value, name: &str) -> Option<&'a Value> {
    line.get("fields")
        .and_then(|f| f.get(name))
        .or_else(|| line.get(name))
}

fn read_log(out: impl std::io::Read + Send + 'static, seen: Arc<Mutex<Seen>>) {
    let mut copy = std::env::var("KOE_BENCH_LOG").ok().map(|path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap()
    });
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(copy) = copy.as_mut() {
                let _ = writeln!(copy, "{line}");
            }
            let Ok(value) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let message = field(&value, "message").and_then(Value::as_str);
            let mut seen = seen.lock().unwrap();
            if value.get("level").and_then(Value::as_str) == Some("ERROR") {
                seen.errors += 1;
            }
            match message {
                Some(koe::push::log::MESSAGE) => {
                    let call = field(&value, "callId").and_then(Value::as_str);
                    let at = field(&value, "sentAt")
                        .and_then(Value::as_str)
                        .and_then(|t| DateTime::parse_from_rfc3339(t).ok());
                    if let (Some(call), Some(at)) = (call, at) {
                        let at = at.with_timezone(&Utc);
                        seen.pushes.entry(call.to_owned()).or_default().push(at);
                    }
                }
                Some("dispatch run finished") => seen.runs.push(value),
                _ => {}
            }
        }
    });
}

async fn for_each<F, Fut, T>(count: usize, job: F) -> Vec<T>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let slots = Arc::new(tokio::sync::Semaphore::new(SETUP_CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..count {
        let slot = slots.clone().acquire_owned().await.unwrap();
        let job = job(i);
        tasks.spawn(async move {
            let answer = job.await;
            drop(slot);
            (i, answer)
        });
    }
    let mut answers: Vec<(usize, T)> = tasks.join_all().await;
    answers.sort_by_key(|(i, _)| *i);
    answers.into_iter().map(|(_, a)| a).collect()
}

/// The request's answer, made again (up to 5 times, 200 ms apart) while it is a 503, as the app
/// does with a throttled store's `Retry-After`.
async fn until_not_503(request: reqwest::RequestBuilder) -> Option<reqwest::Response> {
    for _ in 0..5 {
        let answer = request
            .try_clone()?
            .header("x-api-key", API_KEY)
            .send()
            .await
            .ok()?;
        if answer.status() != 503 {
            return Some(answer);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

fn device_id(i: usize) -> String {
    format!("SPIKE-{i:06}")
}

#[tokio::main]
async fn main() -> ExitCode {
    let Some(options) = koe_bench::parsed(parse_args(), "bench-spike-local", Some(USAGE)) else {
        return ExitCode::from(2);
    };
    let (upstream, tables) = koe_bench::fresh_tables("spike").await;
    // koe-local → [timing proxy] → [limits proxy] → DynamoDB Local.
    let proxy = match options.limits {
        true => {
            let mut limits = Limits::from_env();
            if std::env::var("KOE_LIMITS_SCALE").is_err() {
                limits = limits.scaled(0.05);
            }
            let model = Arc::new(LimitsModel::new(limits));
            Some(LimitsProxy::over_tables(&upstream, &tables, model).await)
        }
        false => None,
    };
    let behind = proxy.as_ref().map_or(upstream.clone(), LimitsProxy::url);
    let timing = match options.timeline {
        Some(_) => Some(timing_proxy(behind.clone()).await),
        None => None,
    };
    let endpoint = timing.as_ref().map_or(behind, |t| t.url.clone());

    // The calls table's warm throughput as the proxy models it: what DISPATCH_WRITE_BUDGET
    // tells a deployed dispatcher (a new table's 4,000 WRU/s, scaled with the limits).
    let write_budget = proxy
        .as_ref()
        .map_or(4_000.0, |p| p.model().limits().table_write_units)
        .round()
        .to_string();
    let (chat, agent) = (koe_bench::free_addr(), koe_bench::free_addr());
    let (region, key) = (
        koe_testkit::dynamodb::REGION,
        koe_testkit::dynamodb::ACCESS_KEY,
    );
    let mut child = std::process::Command::new(&options.koe_local)
        .env_clear()
        .envs([
            ("STORE", "dynamodb"),
            ("AWS_ENDPOINT_URL_DYNAMODB", endpoint.as_str()),
            ("AWS_REGION", region),
            ("AWS_ACCESS_KEY_ID", key),
            ("AWS_SECRET_ACCESS_KEY", key),
            ("DEVICES_TABLE", tables.devices.as_str()),
            ("CALLS_TABLE", tables.calls.as_str()),
            ("AGENT_USAGE_TABLE", tables.usage.as_str()),
            ("CHAT_ADDR", chat.as_str()),
            ("AGENT_ADDR", agent.as_str()),
            ("RUST_LOG", "info"),
            ("DISPATCH_WRITE_BUDGET", write_budget.as_str()),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", options.koe_local));
    let seen = Arc::new(Mutex::new(Seen::default()));
    read_log(child.stdout.take().unwrap(), seen.clone());
    read_log(child.stderr.take().unwrap(), seen.clone());

    let base = format!("http://{agent}");
    let http = reqwest::Client::new();
    assert!(
        koe_bench::started(&http, &chat).await,
        "koe-local did not start"
    );

    // Every call at one whole second, `ahead` from now, written in JST as the app does.
    let now = Utc::now();
    // At `--second-of-minute`, the first such second at least `ahead` from now (14 and 75: the
    // creates straddle a minute's end, so some wake a run and the minute's run takes the rest).
    let mut due = now.timestamp() + options.ahead;
    if let Some(s) = options.second_of_minute {
        due += (s - due.rem_euclid(60)).rem_euclid(60);
    }
    let second = DateTime::from_timestamp(due, 0).unwrap();
    let at = second
        .with_timezone(&FixedOffset::east_opt(9 * 3600).unwrap())
        .to_rfc3339();
    let made = for_each(options.calls, |i| {
        let (http, base, at) = (http.clone(), base.clone(), at.clone());
        async move {
            let device = device_id(i);
            let put = json!({"deviceId": device, "voipToken": format!("{i:064x}")});
            let put = http.put(format!("{base}/devices")).json(&put);
            let post = json!({"deviceId": device, "scheduledAt": at, "callerName": "Mika"});
            // The same Idempotency-Key on each try, as the app retries a create.
            let post = http
                .post(format!("{base}/calls"))
                .header("idempotency-key", format!("spike-{i}"))
                .json(&post);
            match (until_not_503(put).await, until_not_503(post).await) {
                (Some(put), Some(post)) if put.status() == 200 && post.status() == 201 => {
                    let body: Value = post.json().await.unwrap_or_default();
                    body["callId"].as_str().map(str::to_owned)
                }
                _ => None,
            }
        }
    })
    .await;
    let created: Vec<String> = made.iter().flatten().cloned().collect();
    let setup_done = Utc::now();
    eprintln!(
        "{} of {} calls created, {} s before their second",
        created.len(),
        options.calls,
        (second - setup_done).num_seconds()
    );

    let watch_until = second + chrono::Duration::from_std(WATCH_AFTER).unwrap();
    while Utc::now() < watch_until {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let statuses = for_each(options.calls, |i| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let answer = http
                .get(format!("{base}/calls?deviceId={}", device_id(i)))
                .header("x-api-key", API_KEY)
                .send()
                .await;
            match answer {
                Ok(r) => r
                    .json::<Value>()
                    .await
                    .ok()
                    .and_then(|b| b["status"].as_str().map(str::to_owned)),
                Err(_) => None,
            }
        }
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();

    let seen = seen.lock().unwrap();
    let mut lateness: Vec<f64> = Vec::new();
    let (mut twice, mut early) = (0, 0);
    for call in &created {
        let pushes = seen.pushes.get(call).map_or(&[][..], Vec::as_slice);
        if pushes.len() > 1 {
            twice += 1;
        }
        if let Some(first) = pushes.iter().min() {
            let late = (*first - second).num_microseconds().unwrap_or(0) as f64 / 1000.0;
            early += usize::from(late < 0.0);
            lateness.push(late);
        }
    }
    lateness.sort_by(f64::total_cmp);
    let missing = created.len() - lateness.len();
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    for status in statuses.iter() {
        *by_status
            .entry(status.clone().unwrap_or_else(|| "none".into()))
            .or_default() += 1;
    }
    let sum = |name: &str| {
        seen.runs
            .iter()
            .filter_map(|r| field(r, name).and_then(Value::as_u64))
            .sum::<u64>()
    };
    let runs_claiming: Vec<u64> = seen
        .runs
        .iter()
        .filter_map(|r| field(r, "claimed").and_then(Value::as_u64))
        .filter(|n| *n > 0)
        .collect();
    let throttled = proxy.as_ref().map_or(0, |p| p.stats().throttled());
    if let Some(p) = &proxy {
        let stats = p.stats();
        eprintln!(
            "throttled by target {:?}, of them at the table level {:?}",
            stats.throttled_by_target, stats.throttled_table_by_target
        );
    }
    let statuses_text = by_status
        .iter()
        .map(|(s, n)| format!("{s}:{n}"))
        .collect::<Vec<_>>()
        .join(",");
    let ms = |p| format!("{:.0}", koe_bench::percentile(&lateness, p));
    // The keys bench/dispatch-scale.sh's table reads too (`path`, `duplicates`, `missed`).
    println!(
        "RESULT path=koe-local calls={} created={} limits={} p50_ms={} p99_ms={} max_ms={:.0} \
         early={early} duplicates={twice} missed={missing} statuses={statuses_text} \
         store_retries={} store_errors={} unresolved={} runs_claiming={} throttled={throttled} \
         log_errors={}",
        options.calls,
        created.len(),
        if options.limits { "scaled" } else { "off" },
        ms(50),
        ms(99),
        lateness.last().copied().unwrap_or(f64::NAN),
        sum("store_retries"),
        sum("store_errors"),
        sum("unresolved"),
        runs_claiming
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("+"),
        seen.errors,
    );

    if let (Some(path), Some(timing)) = (options.timeline, timing) {
        let mut out = std::fs::File::create(&path).unwrap();
        writeln!(out, "operation,sent_ms,answered_ms,status").unwrap();
        let log = timing.log.lock().unwrap();
        let from = second - chrono::Duration::seconds(15);
        for t in log.iter().filter(|t| t.sent >= from) {
            let rel = |x: DateTime<Utc>| (x - second).num_microseconds().unwrap_or(0) as f64 / 1e3;
            writeln!(
                out,
                "{},{:.1},{:.1},{}",
                t.operation,
                rel(t.sent),
                rel(t.answered),
                t.status
            )
            .unwrap();
        }
    }
    ExitCode::SUCCESS
}
