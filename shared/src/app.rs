//! `App`: the ports an endpoint talks to, and the one place every request passes through
//! (body cap, dispatch to the handler, error rendering, error notification, access log).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderValue;

use crate::api::{self, Request, Response};
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::dispatch::trigger::{DispatchTrigger, InProcessTrigger};
use crate::dispatch::{Dispatcher, InFlight, RunCause, RunReport};
use crate::error::{ApiError, ErrorCode};
use crate::event_bus::{ErrorNotification, EventBus, LogEventBus};
use crate::model::ModelProvider;
use crate::oidc::TokenVerifier;
use crate::push::{PushSender, UnavailablePushSender};
use crate::routes::Endpoint;
use crate::store::Store;
use crate::wiring::{NoModel, NoStore};

/// What answers one endpoint (one of [`handlers`]): the handler's call with this app's ports.
pub type Handler = for<'a> fn(&'a App, Request) -> HandlerFuture<'a>;
pub type HandlerFuture<'a> = Pin<Box<dyn Future<Output = Result<Response, ApiError>> + Send + 'a>>;

/// How long an error notification may hold up the error answer.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(2);

pub struct App {
    pub config: Arc<Config>,
    pub model: Arc<dyn ModelProvider>,
    pub events: Arc<dyn EventBus>,
    pub clock: Arc<dyn Clock>,
    pub store: Arc<dyn Store>,
    /// APNs when `APNS_*` is configured, else the logging sender.
    pub push: Arc<dyn PushSender>,
    /// Where POST /internal/dispatch hands a run: by default `run_requests` (koe-local's
    /// dispatcher loop); the dispatch Lambda sets an EventBridge trigger.
    pub dispatch_trigger: Arc<dyn DispatchTrigger>,
    /// Wakes the in-process dispatcher loop (koe-local) for a requested run.
    pub run_requests: Arc<tokio::sync::Notify>,
    /// The calls this process's dispatch runs hold (koe-local starts a run every minute, and
    /// their windows overlap): a run leaves alone what another run here already has.
    in_flight: InFlight,
    /// Verifier of POST /internal/dispatch's ID tokens; `None` refuses every caller.
    oidc: Option<Arc<dyn TokenVerifier>>,
    /// `AWS_LAMBDA_FUNCTION_NAME` in a Lambda; else the route's binary name is reported.
    function_name: Option<String>,
}

impl App {
    /// An app whose ports are all stand-ins that refuse: no model (PROVIDER_NOT_CONFIGURED), no
    /// store (503), no push sender, notifications as log lines, no OIDC issuer (401). The
    /// constructors in [`crate::wiring`] add the adapters a process uses; nothing here touches
    /// the network or builds a client.
    pub fn new(config: Config) -> App {
        let run_requests = Arc::new(tokio::sync::Notify::new());
        App {
            model: Arc::new(NoModel),
            events: Arc::new(LogEventBus),
            clock: Arc::new(SystemClock),
            store: Arc::new(NoStore),
            push: Arc::new(UnavailablePushSender),
            dispatch_trigger: Arc::new(InProcessTrigger {
                requests: run_requests.clone(),
            }),
            run_requests,
            in_flight: InFlight::default(),
            oidc: None,
            function_name: config.lambda.function_name.clone(),
            config: Arc::new(config),
        }
    }

    /// Every adapter the configuration asks for ([`crate::wiring::full`]): OpenAI, EventBridge
    /// when `EVENT_BUS_NAME` is set (else the log), DynamoDB when `STORE=dynamodb` (else the
    /// in-memory store), APNs or the logging sender, the OIDC verifier, the system clock. Builds
    /// clients only; nothing here touches the network. A Lambda builds only its own part
    /// (`wiring::chat`, ...).
    pub async fn from_config(config: Config) -> App {
        crate::wiring::full(config).await
    }

    pub fn with_events(mut self, events: Arc<dyn EventBus>) -> App {
        self.events = events;
        self
    }

    pub fn with_model(mut self, model: Arc<dyn ModelProvider>) -> App {
        self.model = model;
        self
    }

    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> App {
        self.clock = clock;
        self
    }

    pub fn with_store(mut self, store: Arc<dyn Store>) -> App {
        self.store = store;
        self
    }

    pub fn with_push(mut self, push: Arc<dyn PushSender>) -> App {
        self.push = push;
        self
    }

    pub fn with_dispatch_trigger(mut self, trigger: Arc<dyn DispatchTrigger>) -> App {
        self.dispatch_trigger = trigger;
        self
    }

    pub fn with_token_verifier(mut self, verifier: Arc<dyn TokenVerifier>) -> App {
        self.oidc = Some(verifier);
        self
    }

    /// The dispatcher on this app's store, push sender and clock.
    pub fn dispatcher(&self) -> Dispatcher {
        Dispatcher::new(
            self.store.clone(),
            self.push.clone(),
            self.clock.clone(),
            self.config.dispatch.clone(),
            self.config.agent.device_hash_salt.clone(),
        )
        .sharing(self.in_flight.clone())
    }

    /// One dispatch run (the schedule's, a requested one, or koe-local's).
    pub async fn dispatch_run(&self, cause: RunCause) -> RunReport {
        self.dispatcher().run(cause).await
    }

    /// The `X-Api-Key` check of agent endpoints; runs before the body is read.
    /// For POST /internal/dispatch, the part of the OIDC check that needs no I/O (a Bearer token
    /// is present) also runs here; the token itself is verified by the handler.
    pub fn authorize(&self, endpoint: Endpoint, headers: &http::HeaderMap) -> Result<(), ApiError> {
        if endpoint == Endpoint::Dispatch {
            return crate::oidc::bearer_token(headers.get(http::header::AUTHORIZATION))
                .map(|_| ())
                .map_err(|_| api::dispatch::unauthorized());
        }
        if !endpoint.needs_api_key() {
            return Ok(());
        }
        let presented = headers.get("x-api-key").map(HeaderValue::as_bytes);
        match presented {
            Some(key) if self.config.agent.api_keys.accepts(key) => Ok(()),
            _ => Err(ApiError::new(
                ErrorCode::Unauthorized,
                "X-Api-Key is missing or not valid",
            )),
        }
    }

    /// Answers one request for `endpoint`. Never panics on input and always returns a response;
    /// errors carry the contract's error body.
    pub async fn handle(&self, endpoint: Endpoint, request_id: &str, request: Request) -> Response {
        self.handle_with(endpoint, handlers::of(endpoint), request_id, request)
            .await
    }

    /// `handle` with the endpoint's handler named by the caller: a Lambda names its own at
    /// compile time, so no other endpoint's handler (nor what only it uses, such as the agent's
    /// time-zone database) is linked into it.
    pub async fn handle_with(
        &self,
        endpoint: Endpoint,
        handler: Handler,
        request_id: &str,
        request: Request,
    ) -> Response {
        let started = Instant::now();
        let result = match self.authorize(endpoint, request.headers()) {
            Ok(()) => self.checked(endpoint, handler, request).await,
            Err(e) => Err(e),
        };
        self.finish(endpoint, request_id, started, result).await
    }

    /// `handle` for a request whose key the caller already checked with `authorize`.
    pub async fn handle_authorized(
        &self,
        endpoint: Endpoint,
        request_id: &str,
        started: Instant,
        request: Request,
    ) -> Response {
        let result = self
            .checked(endpoint, handlers::of(endpoint), request)
            .await;
        self.finish(endpoint, request_id, started, result).await
    }

    async fn checked(
        &self,
        endpoint: Endpoint,
        handler: Handler,
        request: Request,
    ) -> Result<Response, ApiError> {
        if request.body().len() > endpoint.body_limit() {
            return Err(ApiError::invalid(
                "body",
                format!("must be at most {} bytes", endpoint.body_limit()),
            ));
        }
        handler(self, request).await
    }

    /// Turns a result into the answer: error body, error notification for 5xx, request id
    /// header, access log line.
    pub async fn finish(
        &self,
        endpoint: Endpoint,
        request_id: &str,
        started: Instant,
        result: Result<Response, ApiError>,
    ) -> Response {
        let (mut response, code) = match result {
            Ok(response) => (response, None),
            Err(error) => {
                let code = error.code;
                if error.status().is_server_error() {
                    self.notify(endpoint, code, request_id).await;
                }
                (error.into_response(), Some(code))
            }
        };
        if let Ok(value) = HeaderValue::from_str(request_id) {
            response.headers_mut().insert("x-request-id", value);
        }
        let route = endpoint.route();
        // Only the route's template path: query strings and bodies may carry personal data.
        tracing::info!(
            request_id,
            method = %route.method,
            route = route.path,
            status = response.status().as_u16(),
            code = code.map(ErrorCode::as_str),
            latency_ms = started.elapsed().as_millis() as u64,
            "request"
        );
        response
    }

    fn agent_context(&self) -> api::agent::AgentContext<'_> {
        api::agent::AgentContext {
            model: self.model.as_ref(),
            store: self.store.as_ref(),
            now: self.clock.now(),
            settings: &self.config.agent,
            budget: self.config.openai.budget,
        }
    }

    fn calls_context(&self) -> api::calls::CallsContext<'_> {
        let now = self.clock.now();
        let dispatch = &self.config.dispatch;
        let stale = chrono::Duration::from_std(dispatch.grace + dispatch.claim_timeout)
            .expect("configured durations are small");
        api::calls::CallsContext {
            store: self.store.as_ref(),
            now,
            stale_before: now - stale,
            salt: &self.config.agent.device_hash_salt,
        }
    }

    /// Publishes one error notification. A failure is logged and changes nothing else.
    async fn notify(&self, endpoint: Endpoint, code: ErrorCode, request_id: &str) {
        let route = endpoint.route();
        let notification = ErrorNotification {
            function: self
                .function_name
                .clone()
                .unwrap_or_else(|| route.binary.to_owned()),
            route: format!("{} {}", route.method, route.path),
            code: code.as_str(),
            status: code.status().as_u16(),
            request_id: request_id.to_owned(),
            time: self.clock.now(),
        };
        match tokio::time::timeout(NOTIFY_TIMEOUT, self.events.publish(&notification)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, code = code.as_str(), "error notification not published")
            }
            Err(_) => tracing::warn!(code = code.as_str(), "error notification timed out"),
        }
    }
}

/// The handler of each endpoint: the `api` function it runs, given this app's ports.
pub mod handlers {
    use super::{App, Handler, HandlerFuture};
    use crate::api::{self, Request};
    use crate::routes::Endpoint;

    /// The handler of `endpoint`, chosen at run time (koe-local, tests): links every handler.
    pub fn of(endpoint: Endpoint) -> Handler {
        match endpoint {
            Endpoint::Health => health,
            Endpoint::Info => info,
            Endpoint::ErrorTest => error_test,
            Endpoint::Chat => chat,
            Endpoint::Agent => agent,
            Endpoint::PutDevice => put_device,
            Endpoint::CreateCall => create_call,
            Endpoint::GetCall => get_call,
            Endpoint::CancelCall => cancel_call,
            Endpoint::Dispatch => dispatch,
        }
    }

    pub fn health(_: &App, _: Request) -> HandlerFuture<'_> {
        Box::pin(async { Ok(api::meta::health()) })
    }

    pub fn info(app: &App, _: Request) -> HandlerFuture<'_> {
        Box::pin(async move { Ok(api::meta::info(&app.config.info)) })
    }

    pub fn error_test(_: &App, _: Request) -> HandlerFuture<'_> {
        Box::pin(async { Err(api::meta::error_test()) })
    }

    pub fn chat(app: &App, request: Request) -> HandlerFuture<'_> {
        Box::pin(api::chat::chat(app.model.as_ref(), request))
    }

    pub fn agent(app: &App, request: Request) -> HandlerFuture<'_> {
        Box::pin(async move { api::agent::agent(&app.agent_context(), request).await })
    }

    pub fn put_device(app: &App, request: Request) -> HandlerFuture<'_> {
        Box::pin(api::devices::put_device(
            app.store.as_ref(),
            app.clock.now(),
            &app.config.agent.device_hash_salt,
            request,
        ))
    }

    pub fn create_call(app: &App, request: Request) -> HandlerFuture<'_> {
        Box::pin(async move { api::calls::create(&app.calls_context(), request).await })
    }

    pub fn get_call(app: &App, request: Request) -> HandlerFuture<'_> {
        Box::pin(async move { api::calls::get(&app.calls_context(), request).await })
    }

    pub fn cancel_call(app: &App, request: Request) -> HandlerFuture<'_> {
        Box::pin(async move { api::calls::cancel(&app.calls_context(), request).await })
    }

    pub fn dispatch(app: &App, request: Request) -> HandlerFuture<'_> {
        Box::pin(async move {
            let cx = api::dispatch::DispatchContext {
                verifier: app.oidc.as_deref(),
                trigger: app.dispatch_trigger.as_ref(),
                now: app.clock.now(),
            };
            api::dispatch::request_run(&cx, request).await
        })
    }
}
