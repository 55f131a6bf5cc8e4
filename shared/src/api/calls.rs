//! POST, GET and DELETE /calls: the device's one call reservation.

use chrono::{DateTime, Utc};
use http::StatusCode;

use super::{Request, Response, json_response, query_param};
use crate::api::error::{ApiError, ErrorCode};
use crate::api::json::parse_object;
use crate::domain::device::DeviceId;
use crate::domain::fields::Fields;
use crate::domain::reservation::{
    MAX_CALLER_NAME_CHARS, Reservation, ReservationView, ScheduledAt,
};
use crate::store::{CancelError, CreateError, Store};

/// What the handlers need besides the store.
pub struct CallsContext<'a> {
    pub store: &'a dyn Store,
    pub now: DateTime<Utc>,
    /// Reservations due before this can no longer be sent: a new POST replaces them.
    pub stale_before: DateTime<Utc>,
    pub salt: &'a str,
}

fn device_in_query(request: &Request) -> Result<DeviceId, ApiError> {
    let raw = query_param(request, "deviceId")
        .ok_or_else(|| ApiError::invalid("deviceId", "is required (query parameter)"))?;
    Ok(DeviceId::parse("deviceId", &raw)?)
}

pub async fn create(cx: &CallsContext<'_>, request: Request) -> Result<Response, ApiError> {
    let map = parse_object(request.body())?;
    let fields = Fields::root(&map);
    let device_id = DeviceId::parse("deviceId", fields.required_str("deviceId")?)?;
    let scheduled_at =
        ScheduledAt::parse("scheduledAt", fields.required_str("scheduledAt")?, cx.now)?;
    let caller_name = fields
        .optional_text("callerName", 1, MAX_CALLER_NAME_CHARS)?
        .map(str::to_owned);

    if cx.store.get_device(&device_id).await?.is_none() {
        return Err(ApiError::new(
            ErrorCode::DeviceNotRegistered,
            "deviceId has no VoIP token: register it with PUT /devices first",
        ));
    }
    let reservation = Reservation::new(device_id, scheduled_at, caller_name, cx.now);
    match cx
        .store
        .create_reservation(&reservation, cx.now, cx.stale_before)
        .await
    {
        Ok(()) => {}
        Err(CreateError::Exists) => {
            return Err(ApiError::new(
                ErrorCode::ReservationExists,
                "deviceId already has a pending reservation (scheduled or being sent): cancel it first",
            ));
        }
        Err(CreateError::Store(e)) => return Err(e.into()),
    }
    tracing::info!(
        device = %reservation.device_id.log_hash(cx.salt),
        call_id = reservation.call_id.as_str(),
        "reservation created"
    );
    Ok(json_response(
        StatusCode::CREATED,
        &ReservationView::from(&reservation),
    ))
}

pub async fn get(cx: &CallsContext<'_>, request: Request) -> Result<Response, ApiError> {
    let device_id = device_in_query(&request)?;
    match cx.store.get_reservation(&device_id, cx.now).await? {
        Some(reservation) => Ok(json_response(
            StatusCode::OK,
            &ReservationView::from(&reservation),
        )),
        None => Err(ApiError::new(
            ErrorCode::NotFound,
            "deviceId has no reservation",
        )),
    }
}

pub async fn cancel(cx: &CallsContext<'_>, request: Request) -> Result<Response, ApiError> {
    let device_id = device_in_query(&request)?;
    match cx.store.cancel_reservation(&device_id, cx.now).await {
        Ok(()) => {
            tracing::info!(device = %device_id.log_hash(cx.salt), "reservation cancelled");
            Ok(http::Response::builder()
                .status(StatusCode::NO_CONTENT)
                .body(bytes::Bytes::new())
                .expect("static response parts are valid"))
        }
        Err(CancelError::NotFound) => Err(ApiError::new(
            ErrorCode::NotFound,
            "deviceId has no reservation",
        )),
        Err(CancelError::TooLate(status)) => Err(ApiError::new(
            ErrorCode::TooLate,
            format!(
                "the reservation is already {}: it can no longer be cancelled",
                status.as_str()
            ),
        )),
        Err(CancelError::Store(e)) => Err(e.into()),
    }
}
