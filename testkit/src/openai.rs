//! A stand-in OpenAI Chat Completions server on loopback. It answers like the real one (status
//! codes, bodies, latency, failures) as scripted, and records what it received.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
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
}

impl Behaviour {
    pub fn complete(content: impl Into<String>) -> Behaviour {
        Behaviour::Complete {
            content: content.into(),
            prompt_tokens: 40,
            completion_tokens: 17,
        }
    }

    /// OpenAI's answer when the account's quota is exhausted.
    pub fn insufficient_quota() -> Behaviour {
        Behaviour::Raw {
            status: 429,
            body: json!({"error": {
                "message": "You exceeded your current quota, please check your plan and billing details.",
                "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}})
            .to_string(),
        }
    }

    /// OpenAI's answer when a rate limit is hit (retryable).
    pub fn rate_limited() -> Behaviour {
        Behaviour::Raw {
            status: 429,
            body: json!({"error": {"message": "Rate limit reached for requests",
                "type": "requests", "param": null, "code": "rate_limit_exceeded"}})
            .to_string(),
        }
    }

    pub fn server_error() -> Behaviour {
        Behaviour::Raw {
            status: 500,
            body: json!({"error": {"message": "The server had an error while processing your request.",
                "type": "server_error", "param": null, "code": null}})
            .to_string(),
        }
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

/// The answer to one request; `None` drops the connection.
async fn answer(
    state: &Mutex<State>,
    request: hyper::Request<hyper::body::Incoming>,
) -> Option<hyper::Response<Full<Bytes>>> {
    let path_ok =
        request.method() == http::Method::POST && request.uri().path() == "/v1/chat/completions";
    let authorization = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = request
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
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
    perform(behaviour, &model, schema.as_ref()).await
}

async fn perform(
    mut behaviour: Behaviour,
    model: &str,
    schema: Option<&Value>,
) -> Option<hyper::Response<Full<Bytes>>> {
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

fn respond(status: u16, body: String) -> hyper::Response<Full<Bytes>> {
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}
