//! The agent API's endpoints (`{agent_url}`, `X-Api-Key`): the agent, devices, call
//! reservations and their confirmations, and POST /internal/dispatch (an OIDC ID token instead of the key).

use std::sync::Arc;
use std::time::Duration;

use http::Method;

use super::ports::{Adapters, Ports};
use super::{AGENT_BODY_LIMIT, Api, Auth, Endpoint, Route, SMALL_BODY_LIMIT};
use crate::agent::binding::StepSigner;
use crate::calls::capacity::MinuteCapacity;
use crate::dispatch::Dispatcher;
use crate::dispatch::oidc::TokenVerifier;
use crate::dispatch::trigger::{DispatchTrigger, TriggerError};
use crate::model::ModelProvider;
use crate::platform::clock::Clock;
use crate::platform::config::{AgentConfig, ConfigError};
use crate::platform::error::ApiError;
use crate::platform::metrics::Metrics;
use crate::platform::{Request, Response};
use crate::spend_guard::{GuardedModel, SpendApi, SpendGuard};
use crate::store::prelude::*;

pub struct AgentPorts {
    pub model: Arc<dyn ModelProvider>,
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub settings: AgentConfig,
    /// Total time for one round's provider work.
    pub budget: Duration,
    /// Signs round 1's step ids and checks round 2's.
    pub signer: StepSigner,
}

pub struct DevicePorts {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    /// Salt of the device-id hashes in logs.
    pub salt: String,
}

pub struct CallsPorts {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub salt: String,
    /// How long after its second a reservation can still be sent (grace + claim timeout):
    /// older ones are stale, and a new POST replaces them.
    pub stale_after: chrono::Duration,
    /// The grace period: a `scheduled` reservation this late reads as `missed`.
    pub grace: chrono::Duration,
}

impl Ports for AgentPorts {
    async fn build(adapters: &impl Adapters) -> Result<Self, ConfigError> {
        let settings = adapters.agent_settings()?;
        let signer = StepSigner::new(settings.step_key.clone().ok_or_else(|| ConfigError {
            var: "AGENT_STEP_KEY",
            reason: "must be set: it signs the step ids that bind round 2 to round 1".into(),
        })?);
        let store = adapters.store().await?;
        let clock = adapters.clock();
        let ceiling = adapters.spend_settings()?.agent_daily_tokens;
        Ok(AgentPorts {
            model: GuardedModel::wrap(
                adapters.model()?,
                SpendGuard::new(store.clone(), clock.clone(), SpendApi::Agent, ceiling)
                    .measured_by(adapters.metrics()),
            ),
            store,
            clock,
            settings,
            budget: adapters.openai_settings()?.budget,
            signer,
        })
    }
}

impl Ports for DevicePorts {
    async fn build(adapters: &impl Adapters) -> Result<Self, ConfigError> {
        Ok(DevicePorts {
            store: adapters.store().await?,
            clock: adapters.clock(),
            salt: adapters.device_hash_salt()?,
        })
    }
}

impl Ports for CallsPorts {
    async fn build(adapters: &impl Adapters) -> Result<Self, ConfigError> {
        let dispatch = adapters.dispatch_settings()?;
        Ok(CallsPorts {
            store: adapters.store().await?,
            clock: adapters.clock(),
            salt: adapters.device_hash_salt()?,
            stale_after: chrono::Duration::from_std(dispatch.grace + dispatch.claim_timeout)
                .unwrap_or(chrono::Duration::MAX),
            grace: chrono::Duration::from_std(dispatch.grace).unwrap_or(chrono::Duration::MAX),
        })
    }
}

impl CallsPorts {
    fn context(&self) -> crate::calls::handler::CallsContext<'_> {
        let now = self.clock.now();
        crate::calls::handler::CallsContext {
            store: self.store.as_ref(),
            now,
            stale_before: now - self.stale_after,
            missed_before: now - self.grace,
            salt: &self.salt,
        }
    }
}

pub struct CreatePorts {
    pub calls: CallsPorts,
    /// Wakes a dispatch run for a call no run is sure to take on in time (`dispatch::wake`).
    pub waker: Arc<dyn DispatchTrigger>,
    /// Tells a minute whose calls go past what the calls table serves at once.
    pub capacity: MinuteCapacity,
}

impl Ports for CreatePorts {
    async fn build(adapters: &impl Adapters) -> Result<Self, ConfigError> {
        // Without a bus (a local invocation that set none) every wake fails, logged; the
        // deployed template always sets one.
        let waker = adapters
            .dispatch_trigger()
            .unwrap_or_else(|e| Arc::new(Unwired(e.to_string())));
        Ok(CreatePorts {
            calls: CallsPorts::build(adapters).await?,
            waker,
            capacity: MinuteCapacity {
                write_budget: adapters.dispatch_settings()?.write_budget,
                calls_table: adapters.store_settings()?.tables.calls,
                metrics: adapters.route_metrics(&CreateCall::ROUTE),
            },
        })
    }
}

/// A trigger that cannot be wired (why: its configuration error).
struct Unwired(String);

#[async_trait::async_trait]
impl DispatchTrigger for Unwired {
    async fn request_run(&self) -> Result<(), TriggerError> {
        Err(TriggerError(self.0.clone()))
    }
}

pub struct ConfirmPorts {
    pub calls: CallsPorts,
    /// Its `Confirmed` and `ConfirmLatency` records, dimensioned as its requests' records.
    pub metrics: Metrics,
}

impl Ports for ConfirmPorts {
    async fn build(adapters: &impl Adapters) -> Result<Self, ConfigError> {
        Ok(ConfirmPorts {
            calls: CallsPorts::build(adapters).await?,
            metrics: adapters.route_metrics(&ConfirmCall::ROUTE),
        })
    }
}

pub struct DispatchPorts {
    /// Verifier of the ID tokens; `None` (no issuer configured) refuses every caller.
    pub verifier: Option<Arc<dyn TokenVerifier>>,
    /// Where a requested run is handed (EventBridge in a Lambda, the loop in koe-local).
    pub trigger: Arc<dyn DispatchTrigger>,
    pub clock: Arc<dyn Clock>,
    /// The dispatcher the function's scheduled and requested runs use.
    pub dispatcher: Dispatcher,
}

impl Ports for DispatchPorts {
    async fn build(adapters: &impl Adapters) -> Result<Self, ConfigError> {
        Ok(DispatchPorts {
            verifier: adapters.token_verifier()?,
            trigger: adapters.dispatch_trigger()?,
            clock: adapters.clock(),
            dispatcher: adapters.dispatcher().await?,
        })
    }
}

const fn agent_route(
    method: Method,
    path: &'static str,
    function: &'static str,
    binary: &'static str,
    timeout_secs: u64,
) -> Route {
    Route {
        api: Api::Agent,
        method,
        path,
        function,
        binary,
        body_limit: SMALL_BODY_LIMIT,
        timeout: Duration::from_secs(timeout_secs),
        auth: Auth::ApiKey,
    }
}

/// POST /agent: round 1 (plan or answer) or round 2 (answer from the device's tool results).
pub struct Agent;

impl Endpoint for Agent {
    const ROUTE: Route = Route {
        api: Api::Agent,
        method: Method::POST,
        path: "/agent",
        function: "AgentFunction",
        binary: "agent",
        body_limit: AGENT_BODY_LIMIT,
        timeout: Duration::from_secs(28),
        auth: Auth::ApiKey,
    };
    type Ports = AgentPorts;

    async fn handle(ports: &AgentPorts, request: Request) -> Result<Response, ApiError> {
        let cx = crate::agent::handler::AgentContext {
            model: ports.model.as_ref(),
            store: ports.store.as_ref(),
            now: ports.clock.now(),
            settings: &ports.settings,
            budget: ports.budget,
            signer: &ports.signer,
        };
        crate::agent::handler::agent(&cx, request).await
    }
}

/// PUT /devices: the device's VoIP push token.
pub struct PutDevice;

impl Endpoint for PutDevice {
    const ROUTE: Route = agent_route(
        Method::PUT,
        "/devices",
        "PutDeviceFunction",
        "put-device",
        15,
    );
    type Ports = DevicePorts;

    async fn handle(ports: &DevicePorts, request: Request) -> Result<Response, ApiError> {
        let now = ports.clock.now();
        crate::devices::handler::put_device(ports.store.as_ref(), now, &ports.salt, request).await
    }
}

/// POST /calls: reserve the device's call.
pub struct CreateCall;

impl Endpoint for CreateCall {
    const ROUTE: Route = agent_route(
        Method::POST,
        "/calls",
        "CreateCallFunction",
        "create-call",
        20,
    );
    type Ports = CreatePorts;

    async fn handle(ports: &CreatePorts, request: Request) -> Result<Response, ApiError> {
        crate::calls::handler::create(
            &ports.calls.context(),
            ports.waker.as_ref(),
            &ports.capacity,
            request,
        )
        .await
    }
}

/// GET /calls?deviceId=: the device's reservation.
pub struct GetCall;

impl Endpoint for GetCall {
    const ROUTE: Route = agent_route(Method::GET, "/calls", "GetCallFunction", "get-call", 10);
    type Ports = CallsPorts;

    async fn handle(ports: &CallsPorts, request: Request) -> Result<Response, ApiError> {
        crate::calls::handler::get(&ports.context(), request).await
    }
}

/// DELETE /calls?deviceId=: cancel it, until the dispatcher claims it.
pub struct CancelCall;

impl Endpoint for CancelCall {
    const ROUTE: Route = agent_route(
        Method::DELETE,
        "/calls",
        "CancelCallFunction",
        "cancel-call",
        10,
    );
    type Ports = CallsPorts;

    async fn handle(ports: &CallsPorts, request: Request) -> Result<Response, ApiError> {
        crate::calls::handler::cancel(&ports.context(), request).await
    }
}

/// POST /calls/confirm: the device confirms that a call's push reached it.
pub struct ConfirmCall;

impl Endpoint for ConfirmCall {
    const ROUTE: Route = agent_route(
        Method::POST,
        "/calls/confirm",
        "ConfirmCallFunction",
        "confirm-call",
        15,
    );
    type Ports = ConfirmPorts;

    async fn handle(ports: &ConfirmPorts, request: Request) -> Result<Response, ApiError> {
        let calls = &ports.calls;
        let cx = crate::calls::confirm::ConfirmContext {
            store: calls.store.as_ref(),
            clock: calls.clock.as_ref(),
            grace: calls.grace,
            salt: &calls.salt,
            metrics: &ports.metrics,
        };
        crate::calls::confirm::confirm(&cx, request).await
    }
}

/// POST /internal/dispatch: an external scheduler asks for a run (OIDC ID token). The same
/// function runs the every-minute schedule (`lambda::dispatch`).
pub struct Dispatch;

impl Endpoint for Dispatch {
    const ROUTE: Route = Route {
        api: Api::Agent,
        method: Method::POST,
        path: "/internal/dispatch",
        function: "DispatchRouteFunction",
        binary: "dispatch",
        body_limit: SMALL_BODY_LIMIT,
        timeout: Duration::from_secs(10),
        auth: Auth::Bearer,
    };
    type Ports = DispatchPorts;

    async fn handle(ports: &DispatchPorts, request: Request) -> Result<Response, ApiError> {
        let cx = crate::dispatch::handler::DispatchContext {
            verifier: ports.verifier.as_deref(),
            trigger: ports.trigger.as_ref(),
            now: ports.clock.now(),
        };
        crate::dispatch::handler::request_run(&cx, request).await
    }
}
