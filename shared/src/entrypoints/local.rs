//! The local server behind `koe-local`: both APIs on loopback, routed by the one route table.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::api::{Request, Response};
use crate::app::App;
use crate::config::{ConfigError, Vars};
use crate::dispatch::RunCause;
use crate::error::{ApiError, ErrorCode};
use crate::routes::{self, Api, RouteMiss};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalConfig {
    pub chat_addr: SocketAddr,
    pub agent_addr: SocketAddr,
    /// Run the dispatcher in-process (`LOCAL_DISPATCHER`, default true): at start-up, at every
    /// UTC minute, and whenever POST /internal/dispatch asks.
    pub dispatcher: bool,
}

impl LocalConfig {
    pub fn from_vars(vars: &Vars) -> Result<LocalConfig, ConfigError> {
        let addr = |var: &'static str, default: &str| {
            vars.string_or(var, default)
                .parse::<SocketAddr>()
                .map_err(|_| ConfigError {
                    var,
                    reason: "must be an address like 127.0.0.1:3000".into(),
                })
        };
        Ok(LocalConfig {
            chat_addr: addr("CHAT_ADDR", "127.0.0.1:3000")?,
            agent_addr: addr("AGENT_ADDR", "127.0.0.1:3001")?,
            dispatcher: vars.bool_or("LOCAL_DISPATCHER", true)?,
        })
    }
}

pub fn new_request_id() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// Both APIs serving (and the dispatcher loop, if enabled); dropping it stops them all.
pub struct Running {
    pub chat_addr: SocketAddr,
    pub agent_addr: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Waits until the process is asked to stop (Ctrl-C).
    pub async fn until_ctrl_c(self) {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("stopping");
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Binds both listeners (port 0 picks a free port) and serves them in the background.
pub async fn start(app: Arc<App>, config: &LocalConfig) -> std::io::Result<Running> {
    let chat = TcpListener::bind(config.chat_addr).await?;
    let agent = TcpListener::bind(config.agent_addr).await?;
    let chat_addr = chat.local_addr()?;
    let agent_addr = agent.local_addr()?;
    let mut tasks = vec![
        tokio::spawn(serve(chat, Api::Chat, app.clone())),
        tokio::spawn(serve(agent, Api::Agent, app.clone())),
    ];
    if config.dispatcher {
        tasks.push(tokio::spawn(dispatch_every_minute(app)));
    }
    tracing::info!(%chat_addr, %agent_addr, "koe-local listening");
    Ok(Running {
        chat_addr,
        agent_addr,
        tasks,
    })
}

/// koe-local's dispatcher: a run at start-up, one at every UTC minute (as the deployed schedule
/// does; each lasts the dispatch window, so consecutive runs overlap a little), and one for
/// each POST /internal/dispatch. Aborting this task drops the set, which aborts the runs.
async fn dispatch_every_minute(app: Arc<App>) {
    let mut runs = tokio::task::JoinSet::new();
    let spawn_run = |runs: &mut tokio::task::JoinSet<()>, cause| {
        let app = app.clone();
        runs.spawn(async move {
            app.dispatch_run(cause).await;
        });
    };
    spawn_run(&mut runs, RunCause::Local);
    loop {
        while runs.try_join_next().is_some() {}
        let now = app.clock.now();
        let next_minute =
            chrono::DateTime::from_timestamp((now.timestamp().div_euclid(60) + 1) * 60, 0)
                .expect("a representable minute");
        tokio::select! {
            () = app.clock.sleep_until(next_minute) => {
                if app.clock.now() >= next_minute {
                    spawn_run(&mut runs, RunCause::Local);
                }
            }
            () = app.run_requests.notified() => spawn_run(&mut runs, RunCause::Request),
        }
    }
}

async fn serve(listener: TcpListener, api: Api, app: Arc<App>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        let app = app.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let app = app.clone();
                async move { Ok::<_, Infallible>(answer(&app, api, request).await.map(Full::new)) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(app: &App, api: Api, request: hyper::Request<Incoming>) -> Response {
    let request_id = new_request_id();
    let route = match routes::find(api, request.method(), request.uri().path()) {
        Ok(route) => route,
        Err(miss) => return route_miss(miss),
    };
    let endpoint = route.endpoint;
    let started = Instant::now();
    let limit = endpoint.body_limit();
    let (parts, body) = request.into_parts();
    // The key is checked before a byte of the body is read.
    let refusal = match app.authorize(endpoint, &parts.headers) {
        Err(e) => e,
        Ok(()) => match read_body(body, limit).await {
            Ok(bytes) => {
                return app
                    .handle_authorized(
                        endpoint,
                        &request_id,
                        started,
                        Request::from_parts(parts, bytes),
                    )
                    .await;
            }
            Err(BodyProblem::TooLarge) => {
                ApiError::invalid("body", format!("must be at most {limit} bytes"))
            }
            Err(BodyProblem::Unreadable) => ApiError::invalid("body", "could not be read"),
        },
    };
    closing(
        app.finish(endpoint, &request_id, started, Err(refusal))
            .await,
    )
}

/// How much of an oversized body is read and thrown away, and for how long, before the 400 goes
/// out. A client that is still sending when the server answers and closes would otherwise see a
/// reset connection (broken pipe) instead of the 400; beyond these bounds it may.
const DRAIN_CAP: usize = 16 * 1024 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(10);

enum BodyProblem {
    TooLarge,
    Unreadable,
}

/// Reads the body, keeping at most `limit` bytes. A longer one is refused; its remainder is
/// drained (within `DRAIN_CAP` and `DRAIN_TIME`) so that the refusal reaches the client.
async fn read_body(mut body: Incoming, limit: usize) -> Result<Bytes, BodyProblem> {
    let mut kept = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| BodyProblem::Unreadable)?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if kept.len() + data.len() > limit {
            let mut seen = kept.len() + data.len();
            let drain = async {
                while seen <= DRAIN_CAP {
                    match body.frame().await {
                        Some(Ok(frame)) => {
                            seen += frame.data_ref().map_or(0, Bytes::len);
                        }
                        Some(Err(_)) | None => break,
                    }
                }
            };
            let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
            return Err(BodyProblem::TooLarge);
        }
        kept.extend_from_slice(&data);
    }
    Ok(kept.freeze())
}

/// Marks an answer given before its request body was fully read: the connection is not reused.
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn route_miss(miss: RouteMiss) -> Response {
    match miss {
        RouteMiss::NotFound => ApiError::new(ErrorCode::NotFound, "no such route").into_response(),
        RouteMiss::MethodNotAllowed(allowed) => {
            let allow = allowed
                .iter()
                .map(Method::as_str)
                .collect::<Vec<_>>()
                .join(", ");
            ApiError::new(
                ErrorCode::MethodNotAllowed,
                format!("method not allowed on this path (allowed: {allow})"),
            )
            .with_header(
                http::header::ALLOW,
                HeaderValue::from_str(&allow).expect("method names are valid header values"),
            )
            .into_response()
        }
    }
}
