//! A stand-in OpenAI Chat Completions server on loopback. It answers like the real one (status
//! codes, bodies, latency, failures) as scripted, and records what it received.

use std::collections::VecDeque;
use std::convert::Infallible;
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
}

pub struct StandInOpenAi {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl Drop for StandInOpenAi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandInOpenAi {
    /// Starts on a free loopback port; by default every request gets a small completion.
    pub async fn start() -> StandInOpenAi {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind stand-in");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            script: VecDeque::new(),
            default: Behaviour::complete("stand-in reply"),
            received: Vec::new(),
        }));
        let task = tokio::spawn(serve(listener, state.clone()));
        StandInOpenAi { addr, state, task }
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
}

async fn serve(listener: TcpListener, state: Arc<Mutex<State>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(answer(&state, request).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(
    state: &Mutex<State>,
    request: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Full<Bytes>> {
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
        return respond(
            404,
            json!({"error": {"message": "unknown path"}}).to_string(),
        );
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = body["model"].as_str().unwrap_or("unknown").to_owned();
    let behaviour = {
        let mut state = state.lock().unwrap();
        state.received.push(Received {
            authorization,
            body,
        });
        let default = state.default.clone();
        state.script.pop_front().unwrap_or(default)
    };
    perform(behaviour, &model).await
}

async fn perform(mut behaviour: Behaviour, model: &str) -> hyper::Response<Full<Bytes>> {
    loop {
        match behaviour {
            Behaviour::Delay(by, inner) => {
                tokio::time::sleep(by).await;
                behaviour = *inner;
            }
            Behaviour::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return respond(504, String::new());
            }
            Behaviour::Raw { status, body } => return respond(status, body),
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
                return respond(200, body.to_string());
            }
        }
    }
}

fn respond(status: u16, body: String) -> hyper::Response<Full<Bytes>> {
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}
