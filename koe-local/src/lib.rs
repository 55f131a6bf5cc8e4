//! The local server behind `koe-local`: both APIs on loopback, routed by the one route table
//! (`koe::ROUTES`), each request through its endpoint's `Service` as in a Lambda, and the
//! dispatcher run in-process every minute. Without OpenAI settings chat and agent mode answer
//! from the built-in model ([`model`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::response::IntoResponse;
use bytes::Bytes;
use http::{HeaderValue, Method};
use http_body::Frame;
use http_body_util::BodyExt;
use koe::App;
use koe::agent::api::Agent;
use koe::app::edge::{Answer, BoxBody, Service, new_request_id};
use koe::app::ports::Adapters;
use koe::chat::api::{Chat, ChatStream};
use koe::chat::stream::wants_stream;
use koe::platform::Response;
use koe::platform::config::{ConfigError, DEFAULT_OPENAI_BASE_URL, Vars};
use koe::platform::endpoint::{Api, Endpoint, Route};
use koe::platform::error::{ApiError, ErrorCode};
use koe::platform::secrets::NOT_SET;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod dispatch_loop;
pub mod help;
pub mod model;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalConfig {
    pub chat_addr: SocketAddr,
    pub agent_addr: SocketAddr,
    /// Run the dispatcher in-process (`LOCAL_DISPATCHER`, default true): at start-up, at every
    /// UTC minute, and whenever POST /internal/dispatch asks.
    pub dispatcher: bool,
    /// Chat and agent mode answer from the built-in model ([`model::BuiltinModel`]): no OpenAI
    /// settings are given, that is `OPENAI_API_KEY` is unset, empty or `not-set` (the stack's
    /// placeholder, which the OpenAI adapter reads as unset too) and `OPENAI_BASE_URL` is unset
    /// (or the default). A key or another base URL switches it off.
    pub builtin_model: bool,
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
            builtin_model: vars
                .get("OPENAI_API_KEY")
                .is_none_or(|key| key.trim() == NOT_SET)
                && vars
                    .get("OPENAI_BASE_URL")
                    .is_none_or(|url| url.trim() == DEFAULT_OPENAI_BASE_URL),
        })
    }
}

#[derive(Debug)]
pub enum StartError {
    Config(ConfigError),
    Listen(std::io::Error),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Config(e) => write!(f, "{e}"),
            StartError::Listen(e) => write!(f, "cannot listen: {e}"),
        }
    }
}

/// Both APIs serving (and the dispatcher loop, if enabled). [`Running::shutdown`] stops them
/// gracefully; dropping it stops them at once.
pub struct Running {
    pub chat_addr: SocketAddr,
    pub agent_addr: SocketAddr,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting, lets in-flight requests and a running dispatch finish, then returns.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        for task in std::mem::take(&mut self.tasks) {
            let _ = task.await;
        }
    }

    /// Waits for Ctrl-C, then shuts down gracefully; a second Ctrl-C stops at once.
    pub async fn until_ctrl_c(self) {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!(
            "stopping: finishing in-flight requests and dispatch runs (Ctrl-C again to stop now)"
        );
        tokio::select! {
            () = self.shutdown() => tracing::info!("stopped"),
            _ = tokio::signal::ctrl_c() => tracing::warn!("stopped at once"),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Builds every endpoint's service from `app`, binds both listeners (port 0 picks a free
/// port) and serves them in the background. With [`LocalConfig::builtin_model`] the built-in
/// model answers chat and agent mode (in place of any model `app` was given).
pub async fn start(app: App, config: &LocalConfig) -> Result<Running, StartError> {
    let app = if config.builtin_model {
        tracing::warn!(
            "no OpenAI settings (OPENAI_API_KEY, OPENAI_BASE_URL): chat and agent mode answer \
             from koe-local's built-in model, marked {} and {}: {}; set OPENAI_API_KEY for \
             real replies",
            model::MARKER,
            model::HEADER,
            model::HEADER_VALUE
        );
        let builtin = Arc::new(model::BuiltinModel);
        app.with_model(builtin.clone())
            .with_streaming_model(builtin)
    } else {
        app
    };
    let marked = config.builtin_model;
    let services = app.services().await.map_err(StartError::Config)?;
    // POST /api/chat with `Accept: text/event-stream` (deployed: the chat-stream function).
    let streaming = Arc::new(
        app.service::<ChatStream>()
            .await
            .map_err(StartError::Config)?,
    );
    let dispatcher = if config.dispatcher {
        Some(app.dispatcher().await.map_err(StartError::Config)?)
    } else {
        None
    };
    let chat = TcpListener::bind(config.chat_addr)
        .await
        .map_err(StartError::Listen)?;
    let agent = TcpListener::bind(config.agent_addr)
        .await
        .map_err(StartError::Listen)?;
    let chat_addr = chat.local_addr().map_err(StartError::Listen)?;
    let agent_addr = agent.local_addr().map_err(StartError::Listen)?;
    let (stop, stopped) = watch::channel(false);
    let mut tasks = vec![
        tokio::spawn(serve(
            chat,
            router(Api::Chat, &services, Some(streaming), marked),
            stopped.clone(),
        )),
        tokio::spawn(serve(
            agent,
            router(Api::Agent, &services, None, marked),
            stopped.clone(),
        )),
    ];
    if let Some(dispatcher) = dispatcher {
        tasks.push(tokio::spawn(dispatch_loop::every_minute(
            dispatcher,
            app.clock(),
            app.run_requests(),
            stopped,
        )));
    }
    tracing::info!(%chat_addr, %agent_addr, "koe-local listening");
    Ok(Running {
        chat_addr,
        agent_addr,
        stop,
        tasks,
    })
}

async fn serve(listener: TcpListener, router: Router, mut stopped: watch::Receiver<bool>) {
    let shutdown = async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    // Streamed answers are many small writes: without TCP_NODELAY, Nagle's algorithm holds each
    // event until the previous one is acknowledged.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    if let Err(e) = axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::error!(error = %e, "server stopped");
    }
}

/// One API's router: each path of the route table answers its methods through their services;
/// other methods get 405 with `Allow`, other paths 404, both with the contract's error body.
/// `streaming` answers POST /api/chat when the request asks for server-sent events; `marked`:
/// the model routes' answers say the built-in model wrote them ([`model::HEADER`]).
fn router(
    api: Api,
    services: &[Arc<dyn Answer>],
    streaming: Option<Arc<Service<ChatStream>>>,
    marked: bool,
) -> Router {
    let mut by_path: BTreeMap<&'static str, Vec<Arc<dyn Answer>>> = BTreeMap::new();
    for service in services.iter().filter(|s| s.route().api == api) {
        by_path
            .entry(service.route().path)
            .or_default()
            .push(service.clone());
    }
    let mut router = Router::new();
    for (path, on_path) in by_path {
        let on_path = Arc::new(on_path);
        let streaming = streaming.clone().filter(|_| path == ChatStream::ROUTE.path);
        router = router.route(
            path,
            axum::routing::any(move |request: Request| {
                let on_path = on_path.clone();
                let streaming = streaming.clone();
                async move {
                    match streaming {
                        Some(chat) if streams(&request) => {
                            answer_streaming(&chat, request, marked).await
                        }
                        _ => answer(&on_path, request, marked).await,
                    }
                }
            }),
        );
    }
    router.fallback(|| async {
        to_axum(ApiError::new(ErrorCode::NotFound, "no such route").into_response())
    })
}

/// Whether `route`'s endpoint asks the model (POST /api/chat, POST /agent).
fn asks_the_model(route: &Route) -> bool {
    [Chat::ROUTE, Agent::ROUTE]
        .iter()
        .any(|r| (r.api, &r.method, r.path) == (route.api, &route.method, route.path))
}

async fn answer(
    on_path: &[Arc<dyn Answer>],
    request: Request,
    marked: bool,
) -> axum::response::Response {
    let Some(service) = on_path
        .iter()
        .find(|s| s.route().method == request.method())
    else {
        let allowed: Vec<&Method> = on_path.iter().map(|s| &s.route().method).collect();
        return to_axum(method_not_allowed(&allowed));
    };
    let request_id = new_request_id();
    let (request, read_whole) = tracked(request);
    let mut response = service.answer(&request_id, request).await;
    close_unless_read(&mut response, &read_whole);
    mark(&mut response, marked && asks_the_model(service.route()));
    to_axum(response)
}

/// The request with its body tracked: the flag turns true once the body has been read whole.
fn tracked(request: Request) -> (http::Request<BoxBody>, Arc<AtomicBool>) {
    let (parts, body) = request.into_parts();
    // A request without a body (most GETs) has nothing left on the wire whatever the answer.
    let read_whole = Arc::new(AtomicBool::new(http_body::Body::is_end_stream(&body)));
    let body = Tracked {
        inner: body,
        read_whole: read_whole.clone(),
    }
    .boxed_unsync();
    (http::Request::from_parts(parts, body), read_whole)
}

/// Answered before the body was read (refused key, oversized body): the rest of it may still be
/// on the wire, so the connection is not reused.
fn close_unless_read<B>(response: &mut http::Response<B>, read_whole: &AtomicBool) {
    if !read_whole.load(Ordering::Relaxed) {
        response
            .headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
}

/// The built-in model's header on an answer it wrote (`marked`).
fn mark<B>(response: &mut http::Response<B>, marked: bool) {
    if marked {
        response
            .headers_mut()
            .insert(model::HEADER, HeaderValue::from_static(model::HEADER_VALUE));
    }
}

/// Whether a request to the chat path is the streamed chat (POST, `Accept: text/event-stream`).
fn streams(request: &Request) -> bool {
    request.method() == ChatStream::ROUTE.method && wants_stream(request.headers())
}

/// POST /api/chat as server-sent events: the body is handed to axum as it is produced.
async fn answer_streaming(
    chat: &Service<ChatStream>,
    request: Request,
    marked: bool,
) -> axum::response::Response {
    let request_id = new_request_id();
    let (request, read_whole) = tracked(request);
    let mut response = chat.handle_streaming(&request_id, request).await;
    close_unless_read(&mut response, &read_whole);
    mark(&mut response, marked);
    response.map(Body::new).into_response()
}

fn method_not_allowed(allowed: &[&Method]) -> Response {
    let allow = allowed
        .iter()
        .map(|m| m.as_str())
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

fn to_axum(response: Response) -> axum::response::Response {
    response.map(Body::from).into_response()
}

/// A request body that records whether it was read to its end.
struct Tracked {
    inner: Body,
    read_whole: Arc<AtomicBool>,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = koe::app::edge::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.read_whole.store(true, Ordering::Relaxed);
        }
        polled.map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// How long shutdown waits for running dispatch runs (a run lasts about 70 s).
pub const DISPATCH_SHUTDOWN_WAIT: Duration = Duration::from_secs(80);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_model_is_on_only_without_openai_settings() {
        let builtin = |pairs: &[(&str, &str)]| {
            LocalConfig::from_vars(&Vars::from_pairs(pairs))
                .unwrap()
                .builtin_model
        };
        for none in [
            &[][..],
            &[("OPENAI_API_KEY", ""), ("OPENAI_BASE_URL", " ")],
            &[("OPENAI_API_KEY", "not-set")],
            &[("OPENAI_BASE_URL", DEFAULT_OPENAI_BASE_URL)],
        ] {
            assert!(builtin(none), "{none:?}");
        }
        for some in [
            &[("OPENAI_API_KEY", "sk-local")][..],
            &[("OPENAI_BASE_URL", "http://127.0.0.1:8081/v1")],
            &[
                ("OPENAI_API_KEY", "not-set"),
                ("OPENAI_BASE_URL", "http://127.0.0.1:8081/v1"),
            ],
        ] {
            assert!(!builtin(some), "{some:?}");
        }
    }
}
