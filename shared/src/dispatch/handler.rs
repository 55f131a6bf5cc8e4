//! POST /internal/dispatch: an external scheduler's way to start a dispatch run, behind an
//! OIDC ID token (`Authorization: Bearer`). The run lasts about 70 s, longer than API Gateway
//! lets a request wait, so the answer is 202 as soon as the run is handed on; the run's numbers
//! go to the logs and metrics like every other run's.

use http::StatusCode;
use serde::Serialize;

use crate::dispatch::oidc::{Rejection, TokenVerifier};
use crate::dispatch::trigger::DispatchTrigger;
use crate::platform::endpoint::bearer_refusal;
use crate::platform::error::{ApiError, ErrorCode};
use crate::platform::{Request, Response, json_response};

pub struct DispatchContext<'a> {
    /// `None` when no issuer is configured: every caller is refused.
    pub verifier: Option<&'a dyn TokenVerifier>,
    pub trigger: &'a dyn DispatchTrigger,
    pub now: chrono::DateTime<chrono::Utc>,
}

#[derive(Serialize)]
struct Accepted {
    status: &'static str,
}

pub async fn request_run(cx: &DispatchContext<'_>, request: Request) -> Result<Response, ApiError> {
    let Some(verifier) = cx.verifier else {
        tracing::warn!(
            reason = "no OIDC issuer configured",
            "dispatch request refused"
        );
        return Err(bearer_refusal());
    };
    let authorization = request.headers().get(http::header::AUTHORIZATION);
    match verifier.verify(authorization, cx.now).await {
        Ok(()) => {}
        Err(Rejection::Unauthorized(reason)) => {
            tracing::warn!(reason, "dispatch request refused");
            return Err(bearer_refusal());
        }
        Err(Rejection::JwksUnavailable(error)) => {
            // Not a 5xx: the caller is not verified, and an error answer would let anyone who
            // reaches the route raise error notifications while the issuer is down.
            tracing::warn!(
                error,
                "dispatch request refused: the JWKS is unavailable, so no token can be verified"
            );
            return Err(bearer_refusal());
        }
    }
    let requested = tokio::time::timeout(
        crate::dispatch::trigger::TRIGGER_TIMEOUT,
        cx.trigger.request_run(),
    )
    .await
    .unwrap_or_else(|_| {
        Err(crate::dispatch::trigger::TriggerError(
            "the hand-off timed out".into(),
        ))
    });
    if let Err(e) = requested {
        tracing::error!(error = %e, "dispatch run could not be requested");
        return Err(ApiError::new(
            ErrorCode::ServiceUnavailable,
            "the dispatch run could not be started; retry later",
        ));
    }
    tracing::info!("dispatch run requested");
    Ok(json_response(
        StatusCode::ACCEPTED,
        &Accepted { status: "accepted" },
    ))
}
