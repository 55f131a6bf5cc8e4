//! POST /internal/dispatch's definition: its route (an OIDC ID token instead of the key) and
//! ports, and its handler's call.

use std::sync::Arc;

use http::Method;

use crate::dispatch::Dispatcher;
use crate::dispatch::oidc::TokenVerifier;
use crate::dispatch::trigger::DispatchTrigger;
use crate::platform::clock::Clock;
use crate::platform::endpoint::{Api, Auth, Endpoint, FixtureAnswer, Route};
use crate::platform::error::ApiError;
use crate::platform::{Request, Response};

/// This feature's endpoints in the route table (`app` lists the features).
pub type Endpoints = (Dispatch,);

pub struct DispatchPorts {
    /// Verifier of the ID tokens; `None` (no issuer configured) refuses every caller.
    pub verifier: Option<Arc<dyn TokenVerifier>>,
    /// Where a requested run is handed (EventBridge in a Lambda, the loop in koe-local).
    pub trigger: Arc<dyn DispatchTrigger>,
    pub clock: Arc<dyn Clock>,
    /// The dispatcher the function's scheduled and requested runs use.
    pub dispatcher: Dispatcher,
}

/// POST /internal/dispatch: an external scheduler asks for a run (OIDC ID token). The same
/// function runs the every-minute schedule (`lambda::dispatch`).
pub struct Dispatch;

impl Endpoint for Dispatch {
    const ROUTE: Route = Route::new(
        Api::Agent,
        Method::POST,
        "/internal/dispatch",
        "DispatchRouteFunction",
        "dispatch",
        10,
        FixtureAnswer {
            status: 401,
            holds: r#""code":"UNAUTHORIZED""#,
        },
    )
    .with_auth(Auth::Bearer);
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
