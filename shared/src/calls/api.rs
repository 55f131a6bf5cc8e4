//! The call endpoints' definitions (`{agent_url}`, `X-Api-Key`): POST, GET and DELETE /calls
//! and POST /calls/confirm, their routes and ports, and their handlers' calls.

use std::sync::Arc;

use http::Method;

use crate::calls::capacity::MinuteCapacity;
use crate::dispatch::trigger::DispatchTrigger;
use crate::platform::clock::Clock;
use crate::platform::endpoint::{Api, Endpoint, FixtureAnswer, Route};
use crate::platform::error::ApiError;
use crate::platform::metrics::Metrics;
use crate::platform::{Request, Response};
use crate::store::prelude::*;

/// This feature's endpoints in the route table, in its order (`app` lists the features).
pub type Endpoints = (CreateCall, GetCall, CancelCall, ConfirmCall);

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

pub struct ConfirmPorts {
    pub calls: CallsPorts,
    /// Its `Confirmed` and `ConfirmLatency` records, dimensioned as its requests' records.
    pub metrics: Metrics,
}

/// POST /calls: reserve the device's call.
pub struct CreateCall;

impl Endpoint for CreateCall {
    const ROUTE: Route = Route::new(
        Api::Agent,
        Method::POST,
        "/calls",
        "CreateCallFunction",
        "create-call",
        20,
        FixtureAnswer {
            status: 201,
            holds: r#""status":"scheduled""#,
        },
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
    const ROUTE: Route = Route::new(
        Api::Agent,
        Method::GET,
        "/calls",
        "GetCallFunction",
        "get-call",
        10,
        FixtureAnswer {
            status: 200,
            holds: r#""callerName":"こえ""#,
        },
    );
    type Ports = CallsPorts;

    async fn handle(ports: &CallsPorts, request: Request) -> Result<Response, ApiError> {
        crate::calls::handler::get(&ports.context(), request).await
    }
}

/// DELETE /calls?deviceId=: cancel it, until the dispatcher claims it.
pub struct CancelCall;

impl Endpoint for CancelCall {
    const ROUTE: Route = Route::new(
        Api::Agent,
        Method::DELETE,
        "/calls",
        "CancelCallFunction",
        "cancel-call",
        10,
        FixtureAnswer {
            status: 204,
            holds: "",
        },
    );
    type Ports = CallsPorts;

    async fn handle(ports: &CallsPorts, request: Request) -> Result<Response, ApiError> {
        crate::calls::handler::cancel(&ports.context(), request).await
    }
}

/// POST /calls/confirm: the device confirms that a call's push reached it.
pub struct ConfirmCall;

impl Endpoint for ConfirmCall {
    const ROUTE: Route = Route::new(
        Api::Agent,
        Method::POST,
        "/calls/confirm",
        "ConfirmCallFunction",
        "confirm-call",
        15,
        FixtureAnswer {
            status: 404,
            holds: r#""code":"NOT_FOUND""#,
        },
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
