//! A stand-in OpenAI Chat Completions server on loopback. It answers like the real one (status
//! codes, bodies, latency, failures) as scripted, and records what it received.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// How the stand-in answers one request.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// 200 with a completion whose message content is `content`.
    Complete {
        content: String,
        prompt_tokens: u64,
        completion_tokens: u64,
    },
    /// Any status with any raw body.
    Raw { status: u16, body: String },
    /// Waits, then behaves as the inner behaviour.
    Delay(Duration, Box<Behaviour>),
    /// Never answers (until the client gives up).
    Hang,
    /// Closes the connection without an answer, as a provider that is down (or a proxy that
    /// drops the request) does.
    Disconnect,
    /// For a structured-output request (`response_format` of type `json_schema`), a completion
    /// whose content is a small instance of that schema (see [`schema_instance`]); for any
    /// other request, a completion with `text`. So koe-local's agent API works against the
    /// stand-in without a script.
    SchemaValid { text: String },
    /// The reply `content` written at `pace` (for a streamed request: `data:` chunks, usage in
    /// the last, `[DONE]`; for a JSON request: the whole completion once the pace would have
    /// written it). With `fail_after: Some(n)` a streamed answer breaks off after `n` tokens
    /// (the connection drops mid-body), and a JSON request gets a 500.
    Stream {
        content: String,
        prompt_tokens: u64,
        completion_tokens: u64,
        pace: Pace,
        fail_after: Option<usize>,
    },
}

/// How fast a streamed reply is written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    /// From the request to the first token.
    pub first_token: Duration,
    /// Tokens per second after the first (0: all at once).
    pub tokens_per_second: f64,
}

impl Pace {
    pub const INSTANT: Pace = Pace {
        first_token: Duration::ZERO,
        tokens_per_second: 0.0,
    };

    /// The gap between two tokens.
    pub fn gap(&self) -> Duration {
        if self.tokens_per_second > 0.0 {
            Duration::from_secs_f64(1.0 / self.tokens_per_second)
        } else {
            Duration::ZERO
        }
    }

    /// How long writing `tokens` takes.
    pub fn duration(&self, tokens: usize) -> Duration {
        self.first_token + self.gap() * tokens.saturating_sub(1) as u32
    }
}

/// Cuts text into token-like pieces as a model writes them: a word with its leading space, a
/// punctuation mark, at most 4 letters, one CJK character.
pub fn tokens(text: &str) -> Vec<String> {
    let mut tokens: Vec<String> = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        let starts_new = current.chars().last().is_some_and(|last| {
            let single = |c: char| !c.is_ascii() || c.is_ascii_punctuation();
            single(c)
                || single(last)
                || (c.is_whitespace() && !last.is_whitespace())
                || (!c.is_whitespace() && current.trim_start().chars().count() >= 4)
        });
        if starts_new {
            tokens.push(std::mem::take(&mut current));
        }
        current.push(c);
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

impl Behaviour {
    /// The agent's planner deciding to answer at once (`POST /agent` round 1): `reply`, said
    /// with `emotion`.
    pub fn agent_answer(reply: &str, emotion: &str) -> Behaviour {
        let decision = json!({"decision": {"type": "answer", "reply": reply, "emotion": emotion}});
        Behaviour::complete(decision.to_string())
    }

    pub fn complete(content: impl Into<String>) -> Behaviour {
        Behaviour::Complete {
            content: content.into(),
            prompt_tokens: 40,
            completion_tokens: 17,
        }
    }

    /// A completion whose message has no content, as OpenAI answers a refusal.
    pub fn refusal() -> Behaviour {
        Behaviour::Raw {
            status: 200,
            body: json!({
                "id": "chatcmpl-x", "object": "chat.completion", "model": "gpt-4o-mini",
                "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": null,
                        "refusal": "I can't help with that."}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
            })
            .to_string(),
        }
    }

    /// OpenAI's error answer: `status`, and an `error` object of `message`, `type` and `code`.
    fn error(status: u16, message: &str, kind: &str, code: Option<&str>) -> Behaviour {
        let error = json!({"message": message, "type": kind, "param": null, "code": code});
        Behaviour::Raw {
            status,
            body: json!({ "error": error }).to_string(),
        }
    }

    /// OpenAI's answer when the account's quota is exhausted.
    pub fn insufficient_quota() -> Behaviour {
        let message =
            "You exceeded your current quota, please check your plan and billing details.";
        Behaviour::error(
            429,
            message,
            "insufficient_quota",
            Some("insufficient_quota"),
        )
    }

    /// OpenAI's answer when a rate limit is hit (retryable).
    pub fn rate_limited() -> Behaviour {
        let message = "Rate limit reached for requests";
        Behaviour::error(429, message, "requests", Some("rate_limit_exceeded"))
    }

    pub fn server_error() -> Behaviour {
        let message = "The server had an error while processing your request.";
        Behaviour::error(500, message, "server_error", None)
    }

    pub fn garbage() -> Behaviour {
        Behaviour::Raw {
            status: 200,
            body: "<html>not json</html>".into(),
        }
    }

    /// [`Behaviour::SchemaValid`] with a plain-text fallback.
    pub fn schema_valid() -> Behaviour {
        Behaviour::SchemaValid {
            text: "stand-in reply".into(),
        }
    }

    /// `content` written at `pace`, with the default usage (40 + 17 tokens).
    pub fn streamed(content: impl Into<String>, pace: Pace) -> Behaviour {
        Behaviour::Stream {
            content: content.into(),
            prompt_tokens: 40,
            completion_tokens: 17,
            pace,
            fail_after: None,
        }
    }

    /// `content` written at `pace`, breaking off after `tokens` tokens.
    pub fn streamed_failing(content: impl Into<String>, pace: Pace, tokens: usize) -> Behaviour {
        match Behaviour::streamed(content, pace) {
            Behaviour::Stream {
                content,
                prompt_tokens,
                completion_tokens,
                pace,
                ..
            } => Behaviour::Stream {
                content,
                prompt_tokens,
                completion_tokens,
                pace,
                fail_after: Some(tokens),
            },
            _ => unreachable!(),
        }
    }

    pub fn delayed(self, by: Duration) -> Behaviour {
        Behaviour::Delay(by, Box::new(self))
    }
}

/// One request the stand-in received.
#[derive(Debug, Clone)]
pub struct Received {
    pub authorization: Option<String>,
    pub body: Value,
}

struct State {
    script: VecDeque<Behaviour>,
    default: Behaviour,
    received: Vec<Received>,
    /// Stopped ([`StandInOpenAi::stop`]): a request that still arrives is dropped unanswered.
    down: bool,
    /// The open connections' tasks (closed by `stop`).
    connections: Vec<tokio::task::AbortHandle>,
}

pub struct StandInOpenAi {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    /// The accept loop (replaced by `restart`).
    task: Mutex<JoinHandle<()>>,
}

impl Drop for StandInOpenAi {
    fn drop(&mut self) {
        self.task.lock().unwrap().abort();
    }
}

impl StandInOpenAi {
    /// Starts on a free loopback port; by default every request gets a small completion.
    pub async fn start() -> StandInOpenAi {
        StandInOpenAi::start_on("127.0.0.1:0".parse().unwrap())
            .await
            .expect("bind stand-in")
    }

    /// Starts on `addr` (port 0: a free port); by default every request gets a small completion.
    pub async fn start_on(addr: SocketAddr) -> std::io::Result<StandInOpenAi> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            script: VecDeque::new(),
            default: Behaviour::complete("stand-in reply"),
            received: Vec::new(),
            down: false,
            connections: Vec::new(),
        }));
        let task = Mutex::new(tokio::spawn(serve(listener, state.clone())));
        Ok(StandInOpenAi { addr, state, task })
    }

    /// The value for `OPENAI_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The next requests get these behaviours, in order; then the default applies again.
    pub fn script(&self, behaviours: impl IntoIterator<Item = Behaviour>) {
        self.state.lock().unwrap().script.extend(behaviours);
    }

    pub fn set_default(&self, behaviour: Behaviour) {
        self.state.lock().unwrap().default = behaviour;
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    pub fn request_count(&self) -> usize {
        self.state.lock().unwrap().received.len()
    }

    /// Takes the provider down, as a crashed server is: the port stops listening (new
    /// connections are refused) and the open connections are closed.
    pub async fn stop(&self) {
        {
            let mut state = self.state.lock().unwrap();
            state.down = true;
            for connection in state.connections.drain(..) {
                connection.abort();
            }
        }
        let task = std::mem::replace(&mut *self.task.lock().unwrap(), tokio::spawn(async {}));
        task.abort();
        let _ = task.await; // the listener is closed once the task is gone
    }

    /// Brings the provider back on the same address after [`StandInOpenAi::stop`].
    pub async fn restart(&self) -> std::io::Result<()> {
        let mut attempt = 0;
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                Err(e) if attempt >= 50 => return Err(e),
                Err(_) => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        self.state.lock().unwrap().down = false;
        let task = tokio::spawn(serve(listener, self.state.clone()));
        std::mem::replace(&mut *self.task.lock().unwrap(), task).abort();
        Ok(())
    }
}

async fn serve(listener: TcpListener, state: Arc<Mutex<State>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        // Streamed replies are many small writes (as OpenAI's, which are not held back).
        let _ = stream.set_nodelay(true);
        let connection_state = state.clone();
        let connection = tokio::spawn(async move {
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let state = connection_state.clone();
                async move { answer(&state, request).await.ok_or(Disconnected) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        let mut state = state.lock().unwrap();
        state.connections.retain(|c| !c.is_finished());
        state.connections.push(connection.abort_handle());
    }
}

/// The service's error: hyper closes the connection without an answer.
#[derive(Debug)]
struct Disconnected;

impl std::fmt::Display for Disconnected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stand-in disconnects (scripted)")
    }
}

impl std::error::Error for Disconnected {}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Reply = hyper::Response<BoxBody<Bytes, BoxError>>;

/// The answer to one request; `None` drops the connection.
async fn answer(
    state: &Mutex<State>,
    request: hyper::Request<hyper::body::Incoming>,
) -> Option<Reply> {
    let path_ok =
        request.method() == http::Method::POST && request.uri().path() == "/v1/chat/completions";
    let authorization = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = crate::loopback::body_bytes(request.into_body()).await;
    if !path_ok {
        return Some(respond(
            404,
            json!({"error": {"message": "unknown path"}}).to_string(),
        ));
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = body["model"].as_str().unwrap_or("unknown").to_owned();
    let schema = (body["response_format"]["type"] == "json_schema")
        .then(|| body["response_format"]["json_schema"]["schema"].clone());
    let streaming = body["stream"] == true;
    let behaviour = {
        let mut state = state.lock().unwrap();
        if state.down {
            return None;
        }
        state.received.push(Received {
            authorization,
            body,
        });
        let default = state.default.clone();
        state.script.pop_front().unwrap_or(default)
    };
    perform(behaviour, &model, schema.as_ref(), streaming).await
}

async fn perform(
    mut behaviour: Behaviour,
    model: &str,
    schema: Option<&Value>,
    streaming: bool,
) -> Option<Reply> {
    loop {
        match behaviour {
            Behaviour::Delay(by, inner) => {
                tokio::time::sleep(by).await;
                behaviour = *inner;
            }
            Behaviour::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return Some(respond(504, String::new()));
            }
            Behaviour::Disconnect => return None,
            Behaviour::Raw { status, body } => return Some(respond(status, body)),
            Behaviour::SchemaValid { text } => {
                let content = match schema {
                    Some(schema) => schema_instance(schema, None).to_string(),
                    None => text,
                };
                behaviour = Behaviour::complete(content);
            }
            Behaviour::Complete {
                content,
                prompt_tokens,
                completion_tokens,
            } if streaming => {
                behaviour = Behaviour::Stream {
                    content,
                    prompt_tokens,
                    completion_tokens,
                    pace: Pace::INSTANT,
                    fail_after: None,
                };
            }
            Behaviour::Stream {
                content,
                prompt_tokens,
                completion_tokens,
                pace,
                fail_after,
            } => {
                if streaming {
                    let usage = (prompt_tokens, completion_tokens);
                    return Some(stream(content, usage, model, pace, fail_after));
                }
                tokio::time::sleep(pace.duration(tokens(&content).len())).await;
                behaviour = match fail_after {
                    Some(_) => Behaviour::server_error(),
                    None => Behaviour::Complete {
                        content,
                        prompt_tokens,
                        completion_tokens,
                    },
                };
            }
            Behaviour::Complete {
                content,
                prompt_tokens,
                completion_tokens,
            } => {
                let body = json!({
                    "id": "chatcmpl-standin",
                    "object": "chat.completion",
                    "created": 1767225600,
                    "model": model,
                    "choices": [{
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": null},
                        "logprobs": null,
                        "finish_reason": "stop"
                    }],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + completion_tokens
                    }
                });
                return Some(respond(200, body.to_string()));
            }
        }
    }
}

/// A small JSON value valid against `schema`, the subset of JSON Schema that strict structured
/// output uses (`type`, `enum`, `properties`, `required`, `items`, `anyOf`): every property is
/// filled, `anyOf` takes its first branch, an enum its first value, an array holds one item.
/// A string property named `from` or `to` is an RFC 3339 time (now, and a day later), so a plan
/// of date ranges is valid too; other strings are short text.
pub fn schema_instance(schema: &Value, name: Option<&str>) -> Value {
    if let Some(first) = schema["anyOf"].as_array().and_then(|b| b.first()) {
        return schema_instance(first, name);
    }
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    let kind = match &schema["type"] {
        Value::Array(kinds) => kinds
            .iter()
            .find(|k| *k != "null")
            .and_then(Value::as_str)
            .unwrap_or("null"),
        other => other.as_str().unwrap_or("object"),
    };
    match kind {
        "object" => Value::Object(
            schema["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(key, sub)| (key.clone(), schema_instance(sub, Some(key))))
                .collect(),
        ),
        "array" => Value::Array(vec![schema_instance(&schema["items"], None)]),
        "string" => {
            let now = chrono::Utc::now();
            match name {
                Some("from") => json!(now.to_rfc3339()),
                Some("to") => json!((now + chrono::Duration::days(1)).to_rfc3339()),
                _ => json!("stand-in reply"),
            }
        }
        "integer" | "number" => json!(1),
        "boolean" => json!(true),
        _ => Value::Null,
    }
}

fn respond(status: u16, body: String) -> Reply {
    let body = Full::new(Bytes::from(body)).map_err(|never| match never {});
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(body.boxed())
        .unwrap()
}

/// A streamed completion as OpenAI writes one: a first chunk with the role, one chunk per
/// token at `pace`, a chunk with the finish reason, the usage chunk, `[DONE]`. With
/// `fail_after`, the body breaks off (an error frame: hyper drops the connection) after that
/// many tokens.
fn stream(
    content: String,
    (prompt_tokens, completion_tokens): (u64, u64),
    model: &str,
    pace: Pace,
    fail_after: Option<usize>,
) -> Reply {
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, BoxError>>(16);
    let model = model.to_owned();
    tokio::spawn(async move {
        let chunk = |delta: Value, finish: Value, usage: Value| {
            let choices = if delta.is_null() {
                json!([])
            } else {
                json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}])
            };
            let body = json!({
                "id": "chatcmpl-standin", "object": "chat.completion.chunk",
                "created": 1767225600, "model": model, "system_fingerprint": null,
                "choices": choices, "usage": usage,
            });
            Ok(Bytes::from(format!("data: {body}\n\n")))
        };
        let send = |item| sender.send(item);
        tokio::time::sleep(pace.first_token).await;
        let role = json!({"role": "assistant", "content": "", "refusal": null});
        if send(chunk(role, Value::Null, Value::Null)).await.is_err() {
            return;
        }
        for (i, token) in tokens(&content).into_iter().enumerate() {
            if fail_after == Some(i) {
                // Let the tokens before go out first (hyper drops what is unsent on an error).
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = send(Err("stand-in breaks off (scripted)".into())).await;
                return;
            }
            if i > 0 {
                tokio::time::sleep(pace.gap()).await;
            }
            if send(chunk(json!({"content": token}), Value::Null, Value::Null))
                .await
                .is_err()
            {
                return;
            }
        }
        let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens});
        let _ = send(chunk(json!({}), json!("stop"), Value::Null)).await;
        let _ = send(chunk(Value::Null, Value::Null, usage)).await;
        let _ = send(Ok(Bytes::from_static(b"data: [DONE]\n\n"))).await;
    });
    hyper::Response::builder()
        .status(200)
        .header("content-type", "text/event-stream; charset=utf-8")
        .body(ChannelBody(receiver).boxed())
        .unwrap()
}

/// A body whose frames arrive through a channel; an `Err` ends it as a broken body.
struct ChannelBody(tokio::sync::mpsc::Receiver<Result<Bytes, BoxError>>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        self.0
            .poll_recv(cx)
            .map(|item| item.map(|r| r.map(hyper::body::Frame::data)))
    }
}
