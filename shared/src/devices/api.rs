//! PUT /devices' definition: its route and ports, and its handler's call.

use std::sync::Arc;

use http::Method;

use crate::platform::clock::Clock;
use crate::platform::endpoint::{Api, Endpoint, FixtureAnswer, Route};
use crate::platform::error::ApiError;
use crate::platform::{Request, Response};
use crate::store::prelude::*;

/// This feature's endpoints in the route table (`app` lists the features).
pub type Endpoints = (PutDevice,);

pub struct DevicePorts {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    /// Salt of the device-id hashes in logs.
    pub salt: String,
}

/// PUT /devices: the device's VoIP push token.
pub struct PutDevice;

impl Endpoint for PutDevice {
    const ROUTE: Route = Route::new(
        Api::Agent,
        Method::PUT,
        "/devices",
        "PutDeviceFunction",
        "put-device",
        15,
        FixtureAnswer {
            status: 200,
            holds: r#""environment":"sandbox""#,
        },
    );
    type Ports = DevicePorts;

    async fn handle(ports: &DevicePorts, request: Request) -> Result<Response, ApiError> {
        let now = ports.clock.now();
        crate::devices::handler::put_device(ports.store.as_ref(), now, &ports.salt, request).await
    }
}
