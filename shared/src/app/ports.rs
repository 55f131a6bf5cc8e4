//! How an endpoint's ports are made: each ports type takes what it needs from [`Adapters`], the
//! source of every adapter (`wiring::App` in Lambdas, koe-local and tests). Only what a ports
//! type asks for is built, configured and linked into its function.

use std::future::Future;
use std::sync::Arc;

use crate::agent::api::AgentPorts;
use crate::agent::binding::StepSigner;
use crate::calls::api::{CallsPorts, ConfirmCall, ConfirmPorts, CreateCall, CreatePorts};
use crate::calls::capacity::MinuteCapacity;
use crate::chat::api::{ChatPorts, ChatStreamPorts, InfoPorts, NoPorts};
use crate::devices::api::DevicePorts;
use crate::dispatch::Dispatcher;
use crate::dispatch::api::DispatchPorts;
use crate::dispatch::oidc::TokenVerifier;
use crate::dispatch::trigger::DispatchTrigger;
use crate::dispatch::trigger::TriggerError;
use crate::model::spend_guard::{GuardedModel, GuardedStream, SpendApi, SpendGuard};
use crate::model::{ModelProvider, StreamingModel};
use crate::platform::clock::Clock;
use crate::platform::config::{
    AgentConfig, ConfigError, DispatchConfig, InfoConfig, OpenAiConfig, SpendConfig, StoreConfig,
};
use crate::platform::endpoint::{Endpoint, Route};
use crate::platform::metrics::Metrics;
use crate::store::prelude::*;

/// An endpoint's ports, built once per process (a Lambda's cold start, koe-local's start).
pub trait Ports: Sized + Send + Sync + 'static {
    fn build(adapters: &impl Adapters) -> impl Future<Output = Result<Self, ConfigError>> + Send;
}

/// An endpoint whose ports the adapters build: every endpoint of the route table.
pub trait Served: Endpoint<Ports: Ports> {}

impl<E: Endpoint<Ports: Ports>> Served for E {}

/// The source of every adapter and configuration section. Each accessor reads only its own
/// section of the configuration; a bad value is an error naming the variable.
pub trait Adapters: Sync {
    fn clock(&self) -> Arc<dyn Clock>;
    fn model(&self) -> Result<Arc<dyn ModelProvider>, ConfigError>;
    fn streaming_model(&self) -> Result<Arc<dyn StreamingModel>, ConfigError>;
    fn store(&self) -> impl Future<Output = Result<Arc<dyn Store>, ConfigError>> + Send;
    /// The dispatcher on the store, the push sender and the clock.
    fn dispatcher(&self) -> impl Future<Output = Result<Dispatcher, ConfigError>> + Send;
    /// `None` when no OIDC issuer is configured.
    fn token_verifier(&self) -> Result<Option<Arc<dyn TokenVerifier>>, ConfigError>;
    fn dispatch_trigger(&self) -> Result<Arc<dyn DispatchTrigger>, ConfigError>;
    fn openai_settings(&self) -> Result<OpenAiConfig, ConfigError>;
    fn info_settings(&self) -> Result<InfoConfig, ConfigError>;
    fn agent_settings(&self) -> Result<AgentConfig, ConfigError>;
    fn dispatch_settings(&self) -> Result<DispatchConfig, ConfigError>;
    /// Which store and its table names.
    fn store_settings(&self) -> Result<StoreConfig, ConfigError>;
    /// The daily model-token ceilings of the public APIs.
    fn spend_settings(&self) -> Result<SpendConfig, ConfigError>;
    /// Salt of the device-id hashes in logs.
    fn device_hash_salt(&self) -> Result<String, ConfigError>;
    /// Where the process's metrics go, dimensioned by its function.
    fn metrics(&self) -> Metrics;
    /// The metrics of requests to `route`, dimensioned as the service's own request records
    /// are: by the Lambda's function name, in koe-local by the route's binary.
    fn route_metrics(&self, route: &Route) -> Metrics;
}

impl Ports for ChatStreamPorts {
    async fn build(adapters: &impl Adapters) -> Result<Self, ConfigError> {
        let ceiling = adapters.spend_settings()?.chat_daily_tokens;
        let (store, clock) = (adapters.store().await?, adapters.clock());
        let metrics = adapters.metrics();
        let guard = || {
            SpendGuard::new(store.clone(), clock.clone(), SpendApi::Chat, ceiling)
                .measured_by(metrics.clone())
        };
        Ok(ChatStreamPorts {
            model: GuardedModel::wrap(adapters.model()?, guard()),
            stream: GuardedStream::wrap(adapters.streaming_model()?, guard()),
            budget: adapters.openai_settings()?.budget,
        })
    }
}

impl Ports for NoPorts {
    async fn build(_: &impl Adapters) -> Result<Self, ConfigError> {
        Ok(NoPorts)
    }
}

impl Ports for InfoPorts {
    async fn build(adapters: &impl Adapters) -> Result<Self, ConfigError> {
        Ok(InfoPorts {
            info: adapters.info_settings()?,
        })
    }
}

impl Ports for ChatPorts {
    async fn build(adapters: &impl Adapters) -> Result<Self, ConfigError> {
        let ceiling = adapters.spend_settings()?.chat_daily_tokens;
        Ok(ChatPorts {
            model: GuardedModel::wrap(
                adapters.model()?,
                SpendGuard::new(
                    adapters.store().await?,
                    adapters.clock(),
                    SpendApi::Chat,
                    ceiling,
                )
                .measured_by(adapters.metrics()),
            ),
            budget: adapters.openai_settings()?.budget,
        })
    }
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

impl Ports for CreatePorts {
    async fn build(adapters: &impl Adapters) -> Result<Self, ConfigError> {
        // Without a bus (a local invocation that set none) every wake fails, logged; the
        // deployed template always sets one.
        let waker = adapters
            .dispatch_trigger()
            .unwrap_or_else(|e| Arc::new(Unwired(e.to_string())));
        let dispatch = adapters.dispatch_settings()?;
        Ok(CreatePorts {
            calls: CallsPorts::build(adapters).await?,
            waker,
            capacity: MinuteCapacity {
                write_budget: dispatch.write_budget,
                claim_timeout: dispatch.claim_timeout,
                calls_table: adapters.store_settings()?.tables.calls,
                metrics: adapters.route_metrics(&CreateCall::ROUTE),
            },
        })
    }
}

impl Ports for ConfirmPorts {
    async fn build(adapters: &impl Adapters) -> Result<Self, ConfigError> {
        Ok(ConfirmPorts {
            calls: CallsPorts::build(adapters).await?,
            metrics: adapters.route_metrics(&ConfirmCall::ROUTE),
        })
    }
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

/// A trigger that cannot be wired (why: its configuration error).
struct Unwired(String);

#[async_trait::async_trait]
impl DispatchTrigger for Unwired {
    async fn request_run(&self) -> Result<(), TriggerError> {
        Err(TriggerError(self.0.clone()))
    }
}
