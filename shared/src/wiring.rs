//! What each process is made of: which adapter stands behind each port.
//!
//! One constructor per Lambda (named after its binary), each building only the adapters its
//! endpoint talks to (every other port keeps the refusing stand-in of [`App::new`]) and naming
//! its endpoint's handler. Because the binaries call these by name, the selection happens at
//! compile time: the health function never references the OpenAI, DynamoDB, APNs or OIDC
//! adapters nor another endpoint's handler, so none of them (nor reqwest, the DynamoDB SDK, a2,
//! jsonwebtoken or the agent's time-zone database) is linked into it, and none of them is
//! initialised at its cold start. [`full`] builds every adapter, for koe-local and the tests.
//!
//! | function | model | store | push | OIDC | dispatch trigger |
//! | --- | --- | --- | --- | --- | --- |
//! | health, info, error-test | | | | | |
//! | chat | OpenAI | | | | |
//! | agent | OpenAI | yes | | | |
//! | put-device, create-call, get-call, cancel-call | | yes | | | |
//! | dispatch | | yes | APNs or log | yes | EventBridge |
//!
//! Every function gets the notification bus (EventBridge when `EVENT_BUS_NAME` is set; its
//! client is built at the first notification) and the system clock. The Lambdas' AWS clients
//! take their configuration from the Lambda environment only ([`aws::lambda_environment`]);
//! [`full`] uses the SDK's default chain.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::app::{App, Handler, handlers};
use crate::aws::{self, LoadConfig};
use crate::config::{Config, StoreKind};
use crate::dispatch::trigger::EventBridgeTrigger;
use crate::domain::device::{Device, DeviceId, VoipToken};
use crate::domain::reservation::{CallId, Reservation};
use crate::event_bus::eventbridge::EventBridgeBus;
use crate::event_bus::{EventBus, LogEventBus};
use crate::model::openai::OpenAi;
use crate::model::{ModelProvider, ModelReply, ModelRequest, ProviderError};
use crate::oidc::OidcVerifier;
use crate::push::apns::ApnsSender;
use crate::push::log::LogPushSender;
use crate::push::{PushSender, UnavailablePushSender};
use crate::routes::Endpoint;
use crate::store::dynamodb::DynamoStore;
use crate::store::memory::MemoryStore;
use crate::store::{CancelError, CreateError, Outcome, Store, StoreError, UsageOutcome};

// --- One constructor per Lambda -------------------------------------------------------------

/// The AWS configuration of every Lambda below.
const LAMBDA: LoadConfig = aws::lambda_environment;

/// One Lambda: its endpoint, that endpoint's handler, and the app with its adapters.
pub struct Function {
    pub endpoint: Endpoint,
    pub handler: Handler,
    pub app: App,
}

pub async fn health(config: Config) -> Function {
    Function {
        endpoint: Endpoint::Health,
        handler: handlers::health,
        app: with_events(App::new(config), LAMBDA),
    }
}

pub async fn info(config: Config) -> Function {
    Function {
        endpoint: Endpoint::Info,
        handler: handlers::info,
        app: with_events(App::new(config), LAMBDA),
    }
}

pub async fn error_test(config: Config) -> Function {
    Function {
        endpoint: Endpoint::ErrorTest,
        handler: handlers::error_test,
        app: with_events(App::new(config), LAMBDA),
    }
}

pub async fn chat(config: Config) -> Function {
    Function {
        endpoint: Endpoint::Chat,
        handler: handlers::chat,
        app: with_model(with_events(App::new(config), LAMBDA)),
    }
}

pub async fn agent(config: Config) -> Function {
    Function {
        endpoint: Endpoint::Agent,
        handler: handlers::agent,
        app: with_store(with_model(with_events(App::new(config), LAMBDA)), LAMBDA).await,
    }
}

pub async fn put_device(config: Config) -> Function {
    Function {
        endpoint: Endpoint::PutDevice,
        handler: handlers::put_device,
        app: with_store(with_events(App::new(config), LAMBDA), LAMBDA).await,
    }
}

pub async fn create_call(config: Config) -> Function {
    Function {
        endpoint: Endpoint::CreateCall,
        handler: handlers::create_call,
        app: with_store(with_events(App::new(config), LAMBDA), LAMBDA).await,
    }
}

pub async fn get_call(config: Config) -> Function {
    Function {
        endpoint: Endpoint::GetCall,
        handler: handlers::get_call,
        app: with_store(with_events(App::new(config), LAMBDA), LAMBDA).await,
    }
}

pub async fn cancel_call(config: Config) -> Function {
    Function {
        endpoint: Endpoint::CancelCall,
        handler: handlers::cancel_call,
        app: with_store(with_events(App::new(config), LAMBDA), LAMBDA).await,
    }
}

/// The dispatcher: store, push, the OIDC check of POST /internal/dispatch, and requested runs
/// handed over the notification bus (`EVENT_BUS_NAME`, which the dispatch Lambda requires).
pub async fn dispatch(config: Config) -> Function {
    let trigger = config
        .event_bus_name
        .clone()
        .map(|bus| EventBridgeTrigger::new(bus, LAMBDA));
    let app = with_events(App::new(config), LAMBDA);
    let app = with_oidc(with_push(with_store(app, LAMBDA).await));
    Function {
        endpoint: Endpoint::Dispatch,
        handler: handlers::dispatch,
        app: match trigger {
            Some(trigger) => app.with_dispatch_trigger(Arc::new(trigger)),
            None => app,
        },
    }
}

/// Every adapter the configuration asks for (koe-local, tests), AWS clients configured by the
/// SDK's default chain. POST /internal/dispatch wakes the in-process dispatcher loop.
pub async fn full(config: Config) -> App {
    let app = with_model(with_events(App::new(config), aws::default_chain));
    with_oidc(with_push(with_store(app, aws::default_chain).await))
}

// --- The adapters, each from its part of the configuration ----------------------------------

/// EventBridge when `EVENT_BUS_NAME` is set, else a log line per notification.
fn with_events(app: App, load: LoadConfig) -> App {
    let events: Arc<dyn EventBus> = match &app.config.event_bus_name {
        Some(bus) => Arc::new(EventBridgeBus::new(bus.clone(), load)),
        None => Arc::new(LogEventBus),
    };
    app.with_events(events)
}

/// OpenAI (or compatible); its HTTP client is built here, once per container.
fn with_model(app: App) -> App {
    let model = Arc::new(OpenAi::new(&app.config.openai));
    app.with_model(model)
}

/// DynamoDB when `STORE=dynamodb` (the SDK client is built here, with no network traffic; its
/// timeouts are the adapter's, `AWS_ENDPOINT_URL_DYNAMODB` points it at DynamoDB Local), else
/// the in-memory store.
async fn with_store(app: App, load: LoadConfig) -> App {
    let store: Arc<dyn Store> = match app.config.store.kind {
        StoreKind::Memory => Arc::new(MemoryStore::new()),
        StoreKind::DynamoDb => {
            let sdk = load().await;
            let mut client = aws_sdk_dynamodb::config::Builder::from(&sdk)
                .timeout_config(DynamoStore::timeouts());
            if let Some(url) = app.config.store.dynamodb_endpoint.clone() {
                client = client.endpoint_url(url);
            }
            let client = aws_sdk_dynamodb::Client::from_conf(client.build());
            Arc::new(DynamoStore::new(client, app.config.store.tables.clone()))
        }
    };
    app.with_store(store)
}

/// APNs when `APNS_*` is configured (both clients built here; the provider token is signed
/// now), else the logging sender.
fn with_push(app: App) -> App {
    let push: Arc<dyn PushSender> = match &app.config.apns {
        Some(apns) => match ApnsSender::new(apns) {
            Ok(sender) => Arc::new(sender),
            Err(e) => {
                // A key a2 cannot parse or sign with makes every push fail visibly rather than
                // being silently logged.
                tracing::error!(error = %e, "APNs client could not be built");
                Arc::new(UnavailablePushSender)
            }
        },
        None => Arc::new(LogPushSender::new(
            app.config.agent.device_hash_salt.clone(),
        )),
    };
    app.with_push(push)
}

/// The ID-token verifier of POST /internal/dispatch when `DISPATCH_OIDC_*` is configured (its
/// JWKS is fetched on first use, not here).
fn with_oidc(app: App) -> App {
    match app.config.oidc.clone() {
        Some(oidc) => app.with_token_verifier(Arc::new(OidcVerifier::new(oidc))),
        None => app,
    }
}

// --- Stand-ins for the ports a function does not use ----------------------------------------

/// The model of a function that has none: every completion is PROVIDER_NOT_CONFIGURED.
pub struct NoModel;

#[async_trait]
impl ModelProvider for NoModel {
    async fn complete(&self, _: ModelRequest) -> Result<ModelReply, ProviderError> {
        Err(ProviderError::NotConfigured)
    }
}

/// The store of a function that has none: every call fails (503), so a function wired without
/// the store it needs fails loudly instead of keeping data in memory.
pub struct NoStore;

fn no_store() -> StoreError {
    StoreError("this function has no store".into())
}

#[async_trait]
impl Store for NoStore {
    async fn put_device(&self, _: &Device) -> Result<(), StoreError> {
        Err(no_store())
    }

    async fn get_device(&self, _: &DeviceId) -> Result<Option<Device>, StoreError> {
        Err(no_store())
    }

    async fn remove_device(&self, _: &DeviceId, _: &VoipToken) -> Result<bool, StoreError> {
        Err(no_store())
    }

    async fn create_reservation(
        &self,
        _: &Reservation,
        _: DateTime<Utc>,
        _: DateTime<Utc>,
    ) -> Result<(), CreateError> {
        Err(no_store().into())
    }

    async fn get_reservation(
        &self,
        _: &DeviceId,
        _: DateTime<Utc>,
    ) -> Result<Option<Reservation>, StoreError> {
        Err(no_store())
    }

    async fn cancel_reservation(&self, _: &DeviceId, _: DateTime<Utc>) -> Result<(), CancelError> {
        Err(no_store().into())
    }

    async fn due_reservations(&self, _: &str) -> Result<Vec<Reservation>, StoreError> {
        Err(no_store())
    }

    async fn claim_reservation(
        &self,
        _: &DeviceId,
        _: &CallId,
        _: DateTime<Utc>,
        _: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Err(no_store())
    }

    async fn finish_reservation(
        &self,
        _: &DeviceId,
        _: &CallId,
        _: Outcome,
        _: DateTime<Utc>,
        _: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Err(no_store())
    }

    async fn count_agent_use(
        &self,
        _: &DeviceId,
        _: &str,
        _: u32,
        _: i64,
    ) -> Result<UsageOutcome, StoreError> {
        Err(no_store())
    }
}
