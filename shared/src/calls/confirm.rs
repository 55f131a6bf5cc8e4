//! POST /calls/confirm: a device that confirms its calls says a call's push reached it and it
//! reported the call to CallKit (docs/app.md); the call is `rang` and no push follows.

use std::time::Duration;

use chrono::{DateTime, Utc};
use http::StatusCode;

use super::handler::{CallsContext, admitted};
use crate::domain::device::DeviceId;
use crate::domain::fields::Fields;
use crate::domain::reservation::{CallId, Reservation, ReservationView};
use crate::platform::clock::Clock;
use crate::platform::error::{ApiError, ErrorCode};
use crate::platform::json::parse_object;
use crate::platform::metrics::catalogue::DISPATCH;
use crate::platform::metrics::{Metrics, Record};
use crate::platform::{Request, Response, json_response};
use crate::store::ConfirmAnswer;
use crate::store::prelude::*;

/// How long a confirmation waits, asking again, for a push of its call that is leaving right
/// now: a push leaves within the dispatcher's push budget (1 s), then its outcome is recorded.
pub const IN_FLIGHT_WAIT: Duration = Duration::from_secs(2);
/// The first pause before asking again; each next pause is twice the last.
const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// What the handler needs.
pub struct ConfirmContext<'a> {
    pub store: &'a dyn Store,
    /// Read for each ask: a confirmation is stored at the time it is stored.
    pub clock: &'a dyn Clock,
    /// The grace period: a `scheduled` reservation this late reads as `missed`.
    pub grace: chrono::Duration,
    pub salt: &'a str,
    /// `Confirmed` and `ConfirmLatency` (`Koe/Dispatch`), dimension `Function`.
    pub metrics: &'a Metrics,
}

/// POST /calls/confirm `{"deviceId", "callId"}`: 200 with the reservation as `GET /calls`
/// shows it (`rang`), the same again when repeated; 404 when the device has no reservation
/// with this `callId` whose push has left; 503 with `Retry-After: 1` when a push of the call
/// is still leaving after [`IN_FLIGHT_WAIT`].
pub async fn confirm(cx: &ConfirmContext<'_>, request: Request) -> Result<Response, ApiError> {
    let map = parse_object(request.body())?;
    let fields = Fields::root(&map);
    let device_id = DeviceId::parse("deviceId", fields.required_str("deviceId")?)?;
    let call_id = CallId::parse("callId", fields.required_str("callId")?)?;
    let now = cx.clock.now();
    // The secret check reads the store, the time and the salt only.
    let calls = CallsContext {
        store: cx.store,
        now,
        stale_before: now,
        missed_before: now - cx.grace,
        salt: cx.salt,
    };
    admitted(&calls, &request, &device_id).await?;
    let (reservation, now) = recorded(cx, &device_id, &call_id).await?;
    let device = device_id.log_hash(cx.salt);
    // This ask stored it (the store keeps milliseconds), or an earlier one did.
    let first = reservation.rang_at.map(|at| at.timestamp_millis()) == Some(now.timestamp_millis());
    if first {
        let latency_ms = (now - reservation.scheduled_at.utc())
            .num_milliseconds()
            .max(0);
        cx.metrics
            .emit(&confirmed_record(cx.metrics.function(), now, latency_ms));
        tracing::info!(
            device = %device,
            call_id = call_id.as_str(),
            pushes = reservation.pushes,
            latency_ms,
            "call confirmed"
        );
    } else {
        tracing::info!(
            device = %device,
            call_id = call_id.as_str(),
            "call confirmation repeated: the call was already confirmed"
        );
    }
    Ok(json_response(
        StatusCode::OK,
        &ReservationView::seen(&reservation, now - cx.grace),
    ))
}

/// A call's first confirmation's record (`Koe/Dispatch`, dimension `Function`): `Confirmed` 1
/// and its `ConfirmLatency` from the reserved second. A repeated confirmation writes none.
pub fn confirmed_record(function: &str, at: DateTime<Utc>, latency_ms: i64) -> Record {
    Record::new(DISPATCH, at)
        .dimension("Function", function)
        .count("Confirmed", 1)
        .millis("ConfirmLatency", latency_ms)
}

/// Stores the confirmation, asking again with growing pauses while a push of the call is
/// leaving (for at most [`IN_FLIGHT_WAIT`] from the first ask); the record and the time of the
/// ask that stored (or found) it.
async fn recorded(
    cx: &ConfirmContext<'_>,
    device_id: &DeviceId,
    call_id: &CallId,
) -> Result<(Box<Reservation>, DateTime<Utc>), ApiError> {
    let started = tokio::time::Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        let now = cx.clock.now();
        match cx.store.confirm_call(device_id, call_id, now).await? {
            ConfirmAnswer::Rang(reservation) => return Ok((reservation, now)),
            ConfirmAnswer::NotFound => return Err(not_found()),
            ConfirmAnswer::PushInFlight => {
                let left = IN_FLIGHT_WAIT.saturating_sub(started.elapsed());
                if left.is_zero() {
                    tracing::warn!(
                        device = %device_id.log_hash(cx.salt),
                        call_id = call_id.as_str(),
                        "call confirmation not stored: a push of the call is still leaving"
                    );
                    return Err(push_in_flight());
                }
                tokio::time::sleep(pause.min(left)).await;
                pause *= 2;
            }
        }
    }
}

/// 404 `NOT_FOUND`.
fn not_found() -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        "deviceId has no reservation with this callId whose push has left",
    )
}

/// 503 `SERVICE_UNAVAILABLE`, `Retry-After: 1`. No error notification: a push whose run
/// stopped after its mark stays in flight until a later run records it, and the dispatcher's
/// own metrics and alarms report that run.
fn push_in_flight() -> ApiError {
    let mut error = ApiError::unavailable(
        "a push of this call is leaving right now: confirm again in a moment (see Retry-After)",
    );
    error.notify = false;
    error
}
