//! `App`: the ports an endpoint talks to, and the one place every request passes through
//! (body cap, dispatch to the handler, error rendering, error notification, access log).

use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;

use crate::api::{self, Request, Response};
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::error::{ApiError, ErrorCode};
use crate::event_bus::eventbridge::EventBridgeBus;
use crate::event_bus::{ErrorNotification, EventBus, LogEventBus};
use crate::model::ModelProvider;
use crate::model::openai::OpenAi;
use crate::routes::Endpoint;

/// How long an error notification may hold up the error answer.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(2);

pub struct App {
    pub config: Arc<Config>,
    pub model: Arc<dyn ModelProvider>,
    pub events: Arc<dyn EventBus>,
    pub clock: Arc<dyn Clock>,
    /// `AWS_LAMBDA_FUNCTION_NAME` in a Lambda; else the route's binary name is reported.
    function_name: Option<String>,
}

impl App {
    /// The production wiring: OpenAI, EventBridge when `EVENT_BUS_NAME` is set (else the log),
    /// the system clock. Builds clients only; nothing here touches the network.
    pub fn from_config(config: Config) -> App {
        let events: Arc<dyn EventBus> = match &config.event_bus_name {
            Some(bus) => Arc::new(EventBridgeBus::new(bus.clone())),
            None => Arc::new(LogEventBus),
        };
        App {
            model: Arc::new(OpenAi::new(&config.openai)),
            events,
            clock: Arc::new(SystemClock),
            function_name: std::env::var("AWS_LAMBDA_FUNCTION_NAME").ok(),
            config: Arc::new(config),
        }
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

    /// Answers one request for `endpoint`. Never panics on input and always returns a response;
    /// errors carry the contract's error body.
    pub async fn handle(&self, endpoint: Endpoint, request_id: &str, request: Request) -> Response {
        let started = std::time::Instant::now();
        let result = if request.body().len() > endpoint.body_limit() {
            Err(ApiError::invalid(
                "body",
                format!("must be at most {} bytes", endpoint.body_limit()),
            ))
        } else {
            self.dispatch(endpoint, request).await
        };
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

    async fn dispatch(&self, endpoint: Endpoint, request: Request) -> Result<Response, ApiError> {
        match endpoint {
            Endpoint::Health => Ok(api::meta::health()),
            Endpoint::Info => Ok(api::meta::info(&self.config.info)),
            Endpoint::ErrorTest => Err(api::meta::error_test()),
            Endpoint::Chat => api::chat::chat(self.model.as_ref(), request).await,
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
