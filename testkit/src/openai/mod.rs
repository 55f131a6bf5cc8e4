//! A stand-in OpenAI Chat Completions server on loopback. It answers like the real one (status
//! codes, bodies, latency, failures) as scripted, and records what it received.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
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
        crate::loopback::on_a_free_port("stand-in OpenAI", StandInOpenAi::start_on).await
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

mod behaviour;
mod serve;

pub use self::serve::schema_instance;
use self::serve::serve;
