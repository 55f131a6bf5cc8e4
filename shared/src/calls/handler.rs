//! POST, GET and DELETE /calls: the device's one call reservation. Each checks the device secret
//! as `PUT /devices` does (docs/security.md, "Device-scoped access").

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http::{HeaderName, StatusCode};
use sha2::{Digest, Sha256};

use super::capacity::MinuteCapacity;
use crate::devices::{self, SecretRule};
use crate::dispatch::trigger::DispatchTrigger;
use crate::dispatch::wake::{Wake, wake_for};
use crate::domain::device::DeviceId;
use crate::domain::fields::Fields;
use crate::domain::reservation::{
    CallId, MAX_CALLER_NAME_CHARS, Reservation, ReservationStatus, ReservationView, ScheduledAt,
};
use crate::platform::error::{ApiError, ErrorCode};
use crate::platform::json::parse_object;
use crate::platform::{Request, Response, json_response, query_param};
use crate::store::prelude::*;
use crate::store::{CancelError, CreateError, Created, DeviceProof, IdempotentAnswer};

/// What the handlers need besides the store.
pub struct CallsContext<'a> {
    pub store: &'a dyn Store,
    pub now: DateTime<Utc>,
    /// Reservations due before this can no longer be sent: a new POST replaces them.
    pub stale_before: DateTime<Utc>,
    /// Now minus the grace period: a `scheduled` reservation due before it reads as `missed`.
    pub missed_before: DateTime<Utc>,
    pub salt: &'a str,
}

fn device_in_query(request: &Request) -> Result<DeviceId, ApiError> {
    let raw = query_param(request, "deviceId")
        .ok_or_else(|| ApiError::invalid("deviceId", "is required (query parameter)"))?;
    Ok(DeviceId::parse("deviceId", &raw)?)
}

/// The device secret's check for `/calls` ([`SecretRule::OnceProven`], the devices feature's rule).
pub(super) async fn admitted(
    cx: &CallsContext<'_>,
    request: &Request,
    device_id: &DeviceId,
) -> Result<DeviceProof, ApiError> {
    devices::admitted(
        cx.store,
        request,
        device_id,
        cx.now,
        cx.salt,
        SecretRule::OnceProven,
    )
    .await
}

/// 409 `RESERVATION_GONE`: the reservation a key (and body) made was cancelled or expired.
fn reservation_gone() -> ApiError {
    ApiError::new(
        ErrorCode::ReservationGone,
        "the reservation this Idempotency-Key made no longer exists (cancelled or expired): \
         use a new key to reserve again",
    )
}

/// The request header that makes `POST /calls` safe to retry.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// Set (`true`) on an answer that repeats the first answer to its `Idempotency-Key`.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
/// How long a retry with the same key gets the first answer.
pub const IDEMPOTENCY_WINDOW: chrono::Duration = chrono::Duration::hours(24);
/// Longest `Idempotency-Key` (a UUID is 36).
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 255;

/// The request's `Idempotency-Key` as a SHA-256 digest (hex; the client's key is never stored
/// or logged), or `None` without the header.
fn idempotency_key(request: &Request) -> Result<Option<String>, ApiError> {
    let Some(value) = request.headers().get(&IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let raw = value.as_bytes();
    if raw.is_empty()
        || raw.len() > MAX_IDEMPOTENCY_KEY_CHARS
        || !raw.iter().all(|b| (0x21..=0x7e).contains(b))
    {
        return Err(ApiError::invalid(
            "Idempotency-Key",
            format!(
                "must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} visible ASCII characters (e.g. a UUID)"
            ),
        ));
    }
    Ok(Some(sha256_hex(raw)))
}

fn sha256_hex(bytes: &[u8]) -> String {
    crate::domain::hex(&Sha256::digest(bytes))
}

/// A key's kept answer, for one device: `calls#<sha256 hex of device id and key digest>`. The
/// same key from another device is another key (it neither replays nor reveals this one).
fn device_scoped(device_id: &DeviceId, key: &str) -> String {
    format!(
        "calls#{}",
        sha256_hex(format!("{}\n{key}", device_id.as_str()).as_bytes())
    )
}

/// The reservation id a keyed create makes: derived from the device's key and the body, so
/// that a retry of a create whose answer never came makes the very same reservation (which the
/// store answers as already made, counted once) instead of a second one.
fn keyed_call_id(scoped_key: &str, request_hash: &str) -> CallId {
    let digest = sha256_hex(format!("{scoped_key}\n{request_hash}").as_bytes());
    CallId::from_stored(digest[..32].to_owned())
}

/// POST /calls. The device's secret is checked first. With an `Idempotency-Key` (scoped to the
/// device), the reservation's id comes from the key and the body, and the first 201 is kept for
/// 24 hours: a retry with the same key and body gets it again (even if its `scheduledAt` is no
/// longer far enough ahead) while the reservation exists, 409 `RESERVATION_GONE` once it was
/// cancelled or expired (what is true now, not a reservation that is gone); the same key with
/// another body is 409 `IDEMPOTENCY_KEY_REUSED`. Only a 201 is kept: an error answer can be
/// retried and is judged again, and a retry after an answer that never came makes the same
/// reservation (201, counted once). The create that takes its minute past what the calls table
/// serves at once tells it (`capacity`).
pub async fn create(
    cx: &CallsContext<'_>,
    waker: &dyn DispatchTrigger,
    capacity: &MinuteCapacity,
    request: Request,
) -> Result<Response, ApiError> {
    let idempotency = idempotency_key(&request)?;
    let request_hash = sha256_hex(request.body());
    let map = parse_object(request.body())?;
    let fields = Fields::root(&map);
    let device_id = DeviceId::parse("deviceId", fields.required_str("deviceId")?)?;
    let raw_at = fields.required_str("scheduledAt")?;
    let scheduled_at = ScheduledAt::parse("scheduledAt", raw_at, cx.now);
    let caller_name = fields
        .optional_text("callerName", 1, MAX_CALLER_NAME_CHARS)?
        .map(str::to_owned);
    // Validation before the store, except a time no longer far enough ahead, which a replay
    // of a kept answer may carry.
    let replayable = idempotency.is_some() && DateTime::parse_from_rfc3339(raw_at).is_ok();
    if !replayable {
        scheduled_at.clone()?;
    }
    let proof = admitted(cx, &request, &device_id).await?;
    let key = idempotency.map(|k| device_scoped(&device_id, &k));
    if let Some(key) = &key
        && let Some(answer) = cx.store.idempotent_answer(key, cx.now).await?
    {
        return replay(cx, &device_id, answer, &request_hash).await;
    }
    // Its kept answer may never have been written (the write failed, the function died, the
    // window passed): a cancelled reservation's tombstone still says it is gone.
    let call_id = key.as_ref().map(|key| keyed_call_id(key, &request_hash));
    if let Some(call_id) = &call_id
        && cx.store.was_cancelled(call_id, cx.now).await?
    {
        return Err(reservation_gone());
    }
    let scheduled_at = scheduled_at?;
    if !proof.has_token() {
        return Err(ApiError::new(
            ErrorCode::DeviceNotRegistered,
            "deviceId has no VoIP token: register it with PUT /devices first",
        ));
    }
    let mut reservation = Reservation::new(device_id, scheduled_at, caller_name, cx.now);
    if let Some(call_id) = call_id {
        reservation.call_id = call_id;
    }
    let created = match cx
        .store
        .create_reservation(&reservation, cx.now, cx.stale_before)
        .await
    {
        Ok(Created::New { minute_count }) => {
            if let Some(count) = minute_count {
                capacity.notice(&reservation.scheduled_at.due_minute(), count, cx.now);
            }
            reservation
        }
        Ok(Created::Already(stored)) => {
            tracing::info!(
                call_id = stored.call_id.as_str(),
                "reservation create repeated: the reservation was already made"
            );
            *stored
        }
        Err(CreateError::Cancelled) => return Err(reservation_gone()),
        Err(CreateError::Exists) => {
            return Err(ApiError::new(
                ErrorCode::ReservationExists,
                "deviceId already has a pending reservation (scheduled or being sent): cancel \
                 it first, or GET /calls to see it",
            ));
        }
        Err(CreateError::Store(e)) => return Err(e.into()),
    };
    tracing::info!(
        device = %created.device_id.log_hash(cx.salt),
        call_id = created.call_id.as_str(),
        "reservation created"
    );
    woken(cx, waker, &created).await;
    let response = json_response(StatusCode::CREATED, &ReservationView::from(&created));
    if let Some(key) = key {
        keep(cx, key, request_hash, &response).await;
    }
    Ok(response)
}

/// Wakes a dispatcher for a reservation no run is sure to take on in time (`dispatch::wake`).
/// A wake that fails is logged, not answered: the reservation is made, and the schedule's next
/// run sends it, late within grace.
async fn woken(cx: &CallsContext<'_>, waker: &dyn DispatchTrigger, created: &Reservation) {
    let call_id = created.call_id.as_str();
    match wake_for(cx.store, waker, &created.call_id, cx.now, created.due_at).await {
        Wake::NotNeeded => {}
        Wake::Watched => tracing::info!(call_id, "reservation due soon: a run watches its minute"),
        Wake::Sent => tracing::info!(call_id, "reservation due soon: a dispatch run woken"),
        Wake::Failed(error) => tracing::error!(
            call_id,
            error,
            "reservation due soon: no dispatch run woken; the next scheduled run sends it late"
        ),
    }
}

/// A kept first answer, for what is true now: the same 201 again while the reservation it
/// made is the device's reservation (in any state), 409 `RESERVATION_GONE` once it is not
/// (cancelled, expired, or replaced); 409 `IDEMPOTENCY_KEY_REUSED` for another body.
async fn replay(
    cx: &CallsContext<'_>,
    device_id: &DeviceId,
    answer: IdempotentAnswer,
    request_hash: &str,
) -> Result<Response, ApiError> {
    if answer.request_hash != request_hash {
        return Err(ApiError::new(
            ErrorCode::IdempotencyKeyReused,
            "Idempotency-Key was already used with a different body in the last 24 hours: \
             use a new key for a new request",
        ));
    }
    let made = serde_json::from_str::<serde_json::Value>(&answer.body)
        .ok()
        .and_then(|body| body["callId"].as_str().map(str::to_owned));
    let current = cx.store.get_reservation(device_id, cx.now).await?;
    if current.is_none_or(|r| Some(r.call_id.as_str()) != made.as_deref()) {
        return Err(reservation_gone());
    }
    tracing::info!("reservation answer replayed for a repeated Idempotency-Key");
    http::Response::builder()
        .status(StatusCode::from_u16(answer.status).map_err(|_| ApiError::internal())?)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(IDEMPOTENT_REPLAYED, "true")
        .body(Bytes::from(answer.body))
        .map_err(|_| ApiError::internal())
}

/// Keeps a 201 for the retries of its key. A failure is logged, not answered: the reservation
/// exists, and a retry with the same key makes the same reservation again (201).
async fn keep(cx: &CallsContext<'_>, key: String, request_hash: String, response: &Response) {
    let answer = IdempotentAnswer {
        key,
        request_hash,
        status: response.status().as_u16(),
        body: String::from_utf8_lossy(response.body()).into_owned(),
        expire_at: (cx.now + IDEMPOTENCY_WINDOW).timestamp(),
    };
    match cx.store.keep_idempotent_answer(&answer, cx.now).await {
        Ok(true) => {}
        Ok(false) => tracing::warn!("Idempotency-Key already had an answer kept"),
        Err(e) => tracing::warn!(error = %e, "idempotent answer not kept"),
    }
}

pub async fn get(cx: &CallsContext<'_>, request: Request) -> Result<Response, ApiError> {
    let device_id = device_in_query(&request)?;
    admitted(cx, &request, &device_id).await?;
    match cx.store.get_reservation(&device_id, cx.now).await? {
        Some(reservation) => Ok(json_response(
            StatusCode::OK,
            &ReservationView::seen(&reservation, cx.missed_before),
        )),
        None => Err(ApiError::new(
            ErrorCode::NotFound,
            "deviceId has no reservation",
        )),
    }
}

/// DELETE /calls: cancels the device's reservation while it is `scheduled`; with `callId`
/// (query), only that reservation, so a retried DELETE can never cancel one made since: it is
/// 204 again for the one it cancelled (its tombstone), even after a newer one replaced it.
pub async fn cancel(cx: &CallsContext<'_>, request: Request) -> Result<Response, ApiError> {
    let device_id = device_in_query(&request)?;
    let call_id = query_param(&request, "callId")
        .map(|raw| CallId::parse("callId", &raw))
        .transpose()?;
    admitted(cx, &request, &device_id).await?;
    // Past grace a `scheduled` call can no longer ring: it is `missed` (as GET shows it, and as
    // a dispatch run records it, docs/dispatch.md "How a run works"), too late to cancel; the
    // store tells it from the read the cancel makes anyway.
    match cx
        .store
        .cancel_reservation(&device_id, call_id.as_ref(), cx.now, cx.missed_before)
        .await
    {
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
        Err(CancelError::TooLate(status)) => Err(too_late(status)),
        Err(CancelError::Store(e)) => Err(e.into()),
    }
}

fn too_late(status: ReservationStatus) -> ApiError {
    ApiError::new(
        ErrorCode::TooLate,
        format!(
            "the reservation is already {}: it can no longer be cancelled",
            status.as_str()
        ),
    )
}
