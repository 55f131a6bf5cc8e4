//! PUT /devices: register (or replace) the device's VoIP push token.

use chrono::{DateTime, Utc};
use http::StatusCode;
use serde::Serialize;

use super::{Request, Response, json_response};
use crate::api::error::ApiError;
use crate::api::json::parse_object;
use crate::domain::device::{Device, DeviceId, PushEnvironment, VoipToken};
use crate::domain::fields::Fields;
use crate::domain::reservation::rfc3339_millis;
use crate::store::Store;

/// The stored record minus the token, which is never returned.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DeviceView<'a> {
    device_id: &'a str,
    environment: PushEnvironment,
    updated_at: String,
}

fn parse(body: &[u8], now: DateTime<Utc>) -> Result<Device, ApiError> {
    let map = parse_object(body)?;
    let fields = Fields::root(&map);
    Ok(Device {
        device_id: DeviceId::parse("deviceId", fields.required_str("deviceId")?)?,
        voip_token: VoipToken::parse("voipToken", fields.required_str("voipToken")?)?,
        environment: match fields.optional_str("environment")? {
            None => PushEnvironment::default(),
            Some(raw) => PushEnvironment::parse("environment", raw)?,
        },
        updated_at: now,
    })
}

pub async fn put_device(
    store: &dyn Store,
    now: DateTime<Utc>,
    salt: &str,
    request: Request,
) -> Result<Response, ApiError> {
    let device = parse(request.body(), now)?;
    store.put_device(&device).await?;
    tracing::info!(
        device = %device.device_id.log_hash(salt),
        environment = device.environment.as_str(),
        "device registered"
    );
    Ok(json_response(
        StatusCode::OK,
        &DeviceView {
            device_id: device.device_id.as_str(),
            environment: device.environment,
            updated_at: rfc3339_millis(device.updated_at),
        },
    ))
}
