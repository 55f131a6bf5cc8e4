//! A lean stand-in OpenAI Chat Completions server for the benchmarks under `bench/`: every
//! `POST .../chat/completions` is answered after exactly `--delay-ms` with a small completion.
//!
//! ```sh
//! bench-standin-openai --delay-ms 50 [--addr 127.0.0.1:0] [--threads 1]   # prints OPENAI_BASE_URL
//! ```
//!
//! Unlike `standin-openai` (the scripted test stand-in as a process) it records nothing, so its
//! memory stays flat over millions of requests, and its delay is precise: a tokio timer fires on
//! whole milliseconds (a 50 ms sleep takes 50 to 51 ms), which would be counted as the proxy's
//! overhead. Here one thread sleeps to each request's deadline (requests all wait the same time,
//! so deadlines come in arrival order) and wakes it, about 0.1 ms late at worst.
//!
//! A request with `response_format` (structured output, as `POST /agent`'s planner sends) gets a
//! valid one-step calendar plan; any other gets a short text.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use koe_testkit::loopback::{self, Loopback};
use serde_json::json;
use tokio::sync::oneshot;

type Wake = (Instant, oneshot::Sender<()>);

struct Options {
    addr: SocketAddr,
    delay: Duration,
    threads: usize,
}

const USAGE: &str = "bench-standin-openai [--addr ADDR] [--delay-ms MS] [--threads N]";

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        addr: "127.0.0.1:0".parse().unwrap(),
        delay: Duration::ZERO,
        threads: 1,
    };
    for (flag, value) in koe_bench::flag_pairs()? {
        match flag.as_str() {
            "--addr" => options.addr = value.parse().map_err(|_| "--addr: not an address")?,
            "--delay-ms" => {
                let ms: f64 = value.parse().map_err(|_| "--delay-ms: not a number")?;
                options.delay = Duration::from_secs_f64(ms.max(0.0) / 1000.0);
            }
            "--threads" => {
                options.threads = value.parse().map_err(|_| "--threads: not a number")?;
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let Some(options) = koe_bench::parsed(parse_args(), "bench-standin-openai", Some(USAGE)) else {
        return ExitCode::from(2);
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(options.threads.max(1))
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(serve(options))
}

/// Wakes each waiting request at its deadline. Deadlines arrive in (nearly) ascending order
/// because every request waits the same time.
fn timer_thread(wakes: mpsc::Receiver<Wake>) {
    while let Ok((deadline, wake)) = wakes.recv() {
        let now = Instant::now();
        if deadline > now {
            std::thread::sleep(deadline - now);
        }
        let _ = wake.send(());
    }
}

async fn serve(options: Options) -> ExitCode {
    let (wakes, receiver) = mpsc::channel::<Wake>();
    std::thread::spawn(move || timer_thread(receiver));
    let text = completion("stand-in reply");
    let plan = completion(
        &json!({"decision": {"type": "plan", "steps": [{"tool": "calendar", "args": {
            "from": "2026-01-02T00:00:00+09:00", "to": "2026-01-03T00:00:00+09:00"}}]}})
        .to_string(),
    );
    let delay = options.delay;
    let server = Loopback::start_on(options.addr, move |request| {
        let (wakes, text, plan) = (wakes.clone(), text.clone(), plan.clone());
        async move {
            let arrived = Instant::now();
            let ok = request.method() == http::Method::POST
                && request.uri().path().ends_with("/chat/completions");
            let body = loopback::body_bytes(request.into_body()).await;
            if !delay.is_zero() {
                let (wake, woken) = oneshot::channel();
                if wakes.send((arrived + delay, wake)).is_ok() {
                    let _ = woken.await;
                }
            }
            if !ok {
                loopback::json(404, &br#"{"error":{"message":"unknown path"}}"#[..])
            } else if contains(&body, b"\"response_format\"") {
                loopback::json(200, plan)
            } else {
                loopback::json(200, text)
            }
        }
    })
    .await;
    let server = match server {
        Ok(server) => server,
        Err(e) => {
            eprintln!(
                "bench-standin-openai: cannot listen on {}: {e}",
                options.addr
            );
            return ExitCode::FAILURE;
        }
    };
    let url = format!("{}/v1", server.url());
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "{url}");
    let _ = stdout.flush();
    eprintln!("bench-standin-openai: serving at {url}, delay {delay:?}");
    std::future::pending::<ExitCode>().await
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn completion(content: &str) -> Bytes {
    Bytes::from(
        json!({
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1767225600,
            "model": "gpt-4o-mini",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": null},
                "logprobs": null,
                "finish_reason": "stop"
            }],
            "usage": {"prompt_tokens": 40, "completion_tokens": 17, "total_tokens": 57}
        })
        .to_string(),
    )
}
