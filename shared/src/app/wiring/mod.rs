//! `App`: which adapter stands behind each port, built lazily from the configuration.
//!
//! `App` is the [`Adapters`] every endpoint's ports are built from. Nothing is built until a
//! ports type asks for it, and each adapter reads only its own configuration section, so a
//! Lambda builds (and links) only what its endpoint needs: the health function never reaches
//! the OpenAI, DynamoDB, APNs or OIDC code. koe-local and the tests use one `App` for every
//! endpoint, so they share one store, clock and push sender; `with_*` swaps an adapter first.
//!
//! | port | Lambda ([`App::lambda`]) | local ([`App::local`]) |
//! | --- | --- | --- |
//! | store | DynamoDB (`STORE=dynamodb` is required) | memory, or DynamoDB with `STORE=dynamodb` |
//! | model | OpenAI (or compatible) | same; koe-local without OpenAI settings: its built-in model |
//! | push | APNs when `APNS_*` is set, else the logging sender | same |
//! | events | EventBridge when `EVENT_BUS_NAME` is set, else log lines | same |
//! | dispatch trigger | EventBridge (`EVENT_BUS_NAME` is required) | the in-process loop |
//! | AWS configuration | the Lambda environment only | the SDK's default chain |

use std::sync::{Arc, OnceLock};

use tokio::sync::OnceCell;

mod deployed;
pub use deployed::variables_read;
mod metrics;
mod push;
pub use push::incomplete_record as apns_config_incomplete_record;

use crate::app::Visit;
use crate::app::edge::{Answer, Edge, LiveApiKeys, Service};
use crate::app::ports::{Adapters, Ports, Served};
use crate::dispatch::oidc::{OidcVerifier, TokenVerifier};
use crate::dispatch::trigger::{
    DispatchTrigger, EventBridgeTrigger, InProcessTrigger, RunRequests,
};
use crate::dispatch::{Dispatcher, InFlight};
use crate::event_bus::eventbridge::EventBridgeBus;
use crate::event_bus::grouped::Grouped;
use crate::event_bus::{EventBus, LogEventBus};
use crate::model::openai::OpenAi;
use crate::model::{ModelProvider, StreamingModel};
use crate::platform::aws::{self, LoadConfig};
use crate::platform::clock::{Clock, SystemClock};
use crate::platform::config::{
    AgentConfig, Config, ConfigError, DispatchConfig, EventsConfig, InfoConfig, LambdaConfig,
    OidcConfig, OpenAiConfig, SpendConfig, StoreConfig, StoreKind, Vars,
};
use crate::platform::endpoint::{Auth, Route};
use crate::platform::metrics::{Metrics, MetricsSink};
use crate::platform::secrets::Secrets;
use crate::push::PushSender;
use crate::store::Deadlined;
use crate::store::dynamodb::DynamoStore;
use crate::store::memory::MemoryStore;
use crate::store::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A deployed function: durable store only, runs requested over EventBridge.
    Lambda,
    /// koe-local and tests: any store, requested runs wake the in-process loop.
    Local,
}

pub struct App {
    vars: Vars,
    mode: Mode,
    load: LoadConfig,
    clock: Arc<dyn Clock>,
    openai: OnceLock<Arc<OpenAi>>,
    model: OnceLock<Arc<dyn ModelProvider>>,
    streaming_model: OnceLock<Arc<dyn StreamingModel>>,
    stores: OnceCell<Stores>,
    push: OnceLock<Arc<dyn PushSender>>,
    events: OnceLock<Arc<dyn EventBus>>,
    verifier: OnceLock<Option<Arc<dyn TokenVerifier>>>,
    trigger: OnceLock<Arc<dyn DispatchTrigger>>,
    /// Dispatch timing set by a test or benchmark instead of the configuration.
    dispatch_settings: Option<DispatchConfig>,
    /// Wakes koe-local's dispatcher loop for a requested run.
    run_requests: Arc<RunRequests>,
    /// The calls this process's dispatch runs hold (koe-local's runs overlap).
    in_flight: InFlight,
    /// A deployed function's secrets (none locally: the variables hold them).
    secrets: Secrets,
    /// Where metrics go (`wiring::metrics`): stdout unless `METRICS=off`, or a test's sink.
    metrics_sink: Option<Arc<dyn MetricsSink>>,
}

impl App {
    /// koe-local's and the tests' adapters (AWS clients from the SDK's default chain).
    pub fn local(vars: Vars) -> App {
        App::new(vars, Mode::Local, aws::default_chain)
    }

    fn new(vars: Vars, mode: Mode, load: LoadConfig) -> App {
        App {
            metrics_sink: metrics::sink_for(&vars),
            vars,
            mode,
            load,
            clock: Arc::new(SystemClock),
            openai: OnceLock::new(),
            model: OnceLock::new(),
            streaming_model: OnceLock::new(),
            stores: OnceCell::new(),
            push: OnceLock::new(),
            events: OnceLock::new(),
            verifier: OnceLock::new(),
            trigger: OnceLock::new(),
            dispatch_settings: None,
            run_requests: Arc::default(),
            in_flight: InFlight::default(),
            secrets: Secrets::default(),
        }
    }

    /// Checks every section of the configuration at once (koe-local's start-up).
    pub fn check_config(&self) -> Result<Config, ConfigError> {
        Config::from_vars(&self.vars)
    }

    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> App {
        self.clock = clock;
        self
    }

    /// The OpenAI adapter both model ports share, built once.
    fn openai(&self) -> Result<Arc<OpenAi>, ConfigError> {
        if let Some(openai) = self.openai.get() {
            return Ok(openai.clone());
        }
        let openai = Arc::new(
            OpenAi::new(&self.openai_settings()?)
                .with_api_key(self.secrets.live("OPENAI_API_KEY", &self.vars)),
        );
        Ok(self.openai.get_or_init(|| openai).clone())
    }

    pub fn with_model(self, model: Arc<dyn ModelProvider>) -> App {
        App {
            model: OnceLock::from(model),
            ..self
        }
    }

    /// The streamed chat's model (koe-local's built-in model, with `with_model`).
    pub fn with_streaming_model(self, model: Arc<dyn StreamingModel>) -> App {
        App {
            streaming_model: OnceLock::from(model),
            ..self
        }
    }

    /// The endpoints' and the dispatcher's store (a test's own, as it is, for both).
    pub fn with_store(self, store: Arc<dyn Store>) -> App {
        let store: Arc<dyn Store> = Arc::new(Deadlined(store));
        App {
            stores: OnceCell::new_with(Some(Stores {
                endpoints: store.clone(),
                dispatcher: store,
            })),
            ..self
        }
    }

    pub fn with_push(self, push: Arc<dyn PushSender>) -> App {
        App {
            push: OnceLock::from(push),
            ..self
        }
    }

    pub fn with_events(self, events: Arc<dyn EventBus>) -> App {
        App {
            events: OnceLock::from(events),
            ..self
        }
    }

    pub fn with_token_verifier(self, verifier: Arc<dyn TokenVerifier>) -> App {
        App {
            verifier: OnceLock::from(Some(verifier)),
            ..self
        }
    }

    pub fn with_dispatch_trigger(self, trigger: Arc<dyn DispatchTrigger>) -> App {
        App {
            trigger: OnceLock::from(trigger),
            ..self
        }
    }

    /// Dispatch timing other than the configuration's (tests and benchmarks: a short window).
    pub fn with_dispatch_settings(self, settings: DispatchConfig) -> App {
        App {
            dispatch_settings: Some(settings),
            ..self
        }
    }

    /// What POST /internal/dispatch signals in local mode (koe-local's loop waits on it).
    pub fn run_requests(&self) -> Arc<RunRequests> {
        self.run_requests.clone()
    }

    /// The notification bus: EventBridge when `EVENT_BUS_NAME` is set, else log lines; repeats
    /// grouped (`event_bus::grouped`). A bus given with `with_events` is used as it is.
    pub fn events(&self) -> Result<Arc<dyn EventBus>, ConfigError> {
        if let Some(events) = self.events.get() {
            return Ok(events.clone());
        }
        let bus: Arc<dyn EventBus> = match EventsConfig::from_vars(&self.vars).bus_name {
            Some(bus) => Arc::new(EventBridgeBus::new(bus, self.load)),
            None => Arc::new(LogEventBus),
        };
        // Repeats of one error within a minute become one notification with a count.
        let events: Arc<dyn EventBus> = Arc::new(Grouped::new(bus, self.clock.clone()));
        Ok(self.events.get_or_init(|| events).clone())
    }

    /// One endpoint with its ports and the edge every endpoint has.
    pub async fn service<E: Served>(&self) -> Result<Service<E>, ConfigError> {
        let route = E::ROUTE;
        let api_keys = match route.auth {
            Auth::ApiKey => LiveApiKeys::new(self.secrets.live("AGENT_API_KEYS", &self.vars)),
            Auth::None | Auth::Bearer => LiveApiKeys::none(),
        };
        let metrics = self.route_metrics(&route);
        let edge = Edge {
            events: self.events()?,
            clock: self.clock.clone(),
            function: metrics.function().to_owned(),
            metrics,
            api_keys,
        };
        Ok(Service::new(edge, E::Ports::build(self).await?))
    }

    /// A service of every endpoint, in the route table's order (koe-local, tests).
    pub async fn services(&self) -> Result<Vec<Arc<dyn Answer>>, ConfigError> {
        type Building<'a> = std::pin::Pin<
            Box<dyn Future<Output = Result<Arc<dyn Answer>, ConfigError>> + Send + 'a>,
        >;
        struct Collect<'a>(&'a App, Vec<Building<'a>>);
        impl<'a> Visit for Collect<'a> {
            fn visit<E: Served>(&mut self) {
                let app = self.0;
                self.1.push(Box::pin(async move {
                    Ok(Arc::new(app.service::<E>().await?) as Arc<dyn Answer>)
                }));
            }
        }
        let mut collect = Collect(self, Vec::new());
        crate::app::each(&mut collect);
        let mut services = Vec::new();
        for building in collect.1 {
            services.push(building.await?);
        }
        Ok(services)
    }
}

/// One store for the endpoints and one for the dispatcher, on the same client and connections:
/// with DynamoDB they differ in the device read (`get_device`), one attempt for the dispatcher
/// (which makes it again itself), retried for an endpoint, so that an endpoint reading a device
/// cannot inherit the dispatcher's timing ([`DynamoStore::for_dispatcher`]).
struct Stores {
    endpoints: Arc<dyn Store>,
    dispatcher: Arc<dyn Store>,
}

impl App {
    async fn stores(&self) -> Result<&Stores, ConfigError> {
        self.stores
            .get_or_try_init(|| async {
                let config = StoreConfig::from_vars(&self.vars)?;
                let (endpoints, dispatcher): (Arc<dyn Store>, Arc<dyn Store>) =
                    match (config.kind, self.mode) {
                        (StoreKind::Memory, Mode::Local) => {
                            let memory = Arc::new(MemoryStore::new());
                            (memory.clone(), memory)
                        }
                        (StoreKind::Memory, Mode::Lambda) => {
                            return Err(ConfigError {
                                var: "STORE",
                                reason: "must be dynamodb in a Lambda that stores data".into(),
                            });
                        }
                        (StoreKind::DynamoDb, _) => {
                            let sdk = (self.load)().await;
                            let mut client = aws_sdk_dynamodb::config::Builder::from(&sdk)
                                .timeout_config(DynamoStore::timeouts());
                            if let Some(url) = config.dynamodb_endpoint {
                                client = client.endpoint_url(url);
                            }
                            let client = aws_sdk_dynamodb::Client::from_conf(client.build());
                            let endpoints = DynamoStore::new(client, config.tables);
                            let dispatcher = endpoints.for_dispatcher();
                            (Arc::new(endpoints), Arc::new(dispatcher))
                        }
                    };
                // Each request within the invocation's deadline, for every endpoint.
                Ok(Stores {
                    endpoints: Arc::new(Deadlined(endpoints)),
                    dispatcher: Arc::new(Deadlined(dispatcher)),
                })
            })
            .await
    }
}

impl Adapters for App {
    fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    /// OpenAI (or compatible); its HTTP client is built here, once per container.
    fn model(&self) -> Result<Arc<dyn ModelProvider>, ConfigError> {
        if let Some(model) = self.model.get() {
            return Ok(model.clone());
        }
        let model: Arc<dyn ModelProvider> = self.openai()?;
        Ok(self.model.get_or_init(|| model).clone())
    }

    /// The same OpenAI adapter (one HTTP client), as a stream of the reply.
    fn streaming_model(&self) -> Result<Arc<dyn StreamingModel>, ConfigError> {
        if let Some(model) = self.streaming_model.get() {
            return Ok(model.clone());
        }
        let model: Arc<dyn StreamingModel> = self.openai()?;
        Ok(self.streaming_model.get_or_init(|| model).clone())
    }

    /// DynamoDB when `STORE=dynamodb` (the SDK client is built here, with no network traffic;
    /// `AWS_ENDPOINT_URL_DYNAMODB` points it at DynamoDB Local), else the in-memory store, which
    /// a Lambda refuses: it would lose every write with the container. The endpoints' store:
    /// every request with the SDK's retries (the dispatcher's is [`App::stores`]'s other).
    async fn store(&self) -> Result<Arc<dyn Store>, ConfigError> {
        Ok(self.stores().await?.endpoints.clone())
    }

    /// In a Lambda, big minutes are split into parts for other invocations (through the same
    /// bus as requested runs); koe-local's one process runs whole minutes.
    async fn dispatcher(&self) -> Result<Dispatcher, ConfigError> {
        let dispatcher = Dispatcher::new(
            self.stores().await?.dispatcher.clone(),
            self.push()?,
            self.clock.clone(),
            self.dispatch_settings()?,
            self.device_hash_salt()?,
        )
        .sharing(self.in_flight.clone())
        .measured_by(self.metrics());
        Ok(match self.mode {
            Mode::Lambda => dispatcher.fanning_out(self.dispatch_trigger()?),
            Mode::Local => dispatcher,
        })
    }

    /// The ID-token verifier when `DISPATCH_OIDC_*` is set (its JWKS is fetched on first use).
    fn token_verifier(&self) -> Result<Option<Arc<dyn TokenVerifier>>, ConfigError> {
        if let Some(verifier) = self.verifier.get() {
            return Ok(verifier.clone());
        }
        let verifier = OidcConfig::from_vars(&self.vars)?
            .map(|oidc| Arc::new(OidcVerifier::new(oidc)) as Arc<dyn TokenVerifier>);
        Ok(self.verifier.get_or_init(|| verifier).clone())
    }

    /// EventBridge in a Lambda (the run goes to the dispatch function as an event), the
    /// in-process loop locally.
    fn dispatch_trigger(&self) -> Result<Arc<dyn DispatchTrigger>, ConfigError> {
        if let Some(trigger) = self.trigger.get() {
            return Ok(trigger.clone());
        }
        let trigger: Arc<dyn DispatchTrigger> = match self.mode {
            Mode::Lambda => {
                let bus = EventsConfig::from_vars(&self.vars)
                    .bus_name
                    .ok_or(ConfigError {
                        var: "EVENT_BUS_NAME",
                        reason: "must name the bus that carries requested dispatch runs".into(),
                    })?;
                Arc::new(EventBridgeTrigger::new(bus, self.load))
            }
            Mode::Local => Arc::new(InProcessTrigger {
                requests: self.run_requests.clone(),
            }),
        };
        Ok(self.trigger.get_or_init(|| trigger).clone())
    }

    fn openai_settings(&self) -> Result<OpenAiConfig, ConfigError> {
        OpenAiConfig::from_vars(&self.vars)
    }

    fn info_settings(&self) -> Result<InfoConfig, ConfigError> {
        InfoConfig::from_vars(&self.vars)
    }

    fn agent_settings(&self) -> Result<AgentConfig, ConfigError> {
        AgentConfig::from_vars(&self.vars)
    }

    fn spend_settings(&self) -> Result<SpendConfig, ConfigError> {
        SpendConfig::from_vars(&self.vars)
    }

    fn dispatch_settings(&self) -> Result<DispatchConfig, ConfigError> {
        match &self.dispatch_settings {
            Some(settings) => Ok(settings.clone()),
            None => DispatchConfig::from_vars(&self.vars),
        }
    }

    fn store_settings(&self) -> Result<StoreConfig, ConfigError> {
        StoreConfig::from_vars(&self.vars)
    }

    fn device_hash_salt(&self) -> Result<String, ConfigError> {
        Ok(self.vars.string_or("DEVICE_HASH_SALT", "koe"))
    }

    fn metrics(&self) -> Metrics {
        self.metrics_handle()
    }

    fn route_metrics(&self, route: &Route) -> Metrics {
        let function = match self.mode {
            Mode::Lambda => LambdaConfig::from_vars(&self.vars).function_name,
            Mode::Local => None,
        }
        .unwrap_or_else(|| route.binary.to_owned());
        self.metrics().for_function(&function)
    }
}
