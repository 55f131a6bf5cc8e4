//! How an endpoint's ports are made: each ports type takes what it needs from [`Adapters`], the
//! source of every adapter (`wiring::App` in Lambdas, koe-local and tests). Only what a ports
//! type asks for is built, configured and linked into its function.

use std::future::Future;
use std::sync::Arc;

use crate::dispatch::Dispatcher;
use crate::dispatch::oidc::TokenVerifier;
use crate::dispatch::trigger::DispatchTrigger;
use crate::model::{ModelProvider, StreamingModel};
use crate::platform::clock::Clock;
use crate::platform::config::{
    AgentConfig, ConfigError, DispatchConfig, InfoConfig, OpenAiConfig, SpendConfig, StoreConfig,
};
use crate::platform::metrics::Metrics;
use crate::routes::Route;
use crate::store::prelude::*;

/// An endpoint's ports, built once per process (a Lambda's cold start, koe-local's start).
pub trait Ports: Sized + Send + Sync + 'static {
    fn build(adapters: &impl Adapters) -> impl Future<Output = Result<Self, ConfigError>> + Send;
}

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
