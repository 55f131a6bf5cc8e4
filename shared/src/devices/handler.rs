//! PUT /devices: register (or replace) the device's VoIP push token, guarded by the device's
//! secret once the app has shown it holds it (docs/security.md, "Device-scoped access").

use chrono::{DateTime, Utc};
use http::StatusCode;
use serde::Serialize;

use crate::domain::device::{
    AlertToken, Device, DeviceId, DeviceSecret, PushEnvironment, VoipToken,
};
use crate::domain::fields::Fields;
use crate::domain::reservation::rfc3339_millis;
use crate::platform::error::ApiError;
use crate::platform::json::parse_object;
use crate::platform::{Request, Response, json_response};
use crate::store::DeviceStore;
use crate::store::DeviceWrite;

/// The stored record minus the tokens, which are never returned: the answer of any device
/// endpoint that shows the registration.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct DeviceView<'a> {
    device_id: &'a str,
    environment: PushEnvironment,
    updated_at: String,
    /// The app confirms each call push (`POST /calls/confirm`).
    confirms_calls: bool,
    /// Only when this request issued it: the app keeps it and sends it as `X-Device-Secret`.
    #[serde(skip_serializing_if = "Option::is_none")]
    device_secret: Option<&'a str>,
}

impl<'a> DeviceView<'a> {
    pub(super) fn of(device: &'a Device, device_secret: Option<&'a str>) -> Self {
        Self {
            device_id: device.device_id.as_str(),
            environment: device.environment,
            updated_at: rfc3339_millis(device.updated_at),
            confirms_calls: device.confirms_calls,
            device_secret,
        }
    }
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
        confirms_calls: fields.optional_bool("confirmsCalls")?.unwrap_or(false),
        alert_token: fields
            .optional_str("alertToken")?
            .map(|raw| AlertToken::parse("alertToken", raw))
            .transpose()?,
    })
}

pub async fn put_device(
    store: &dyn DeviceStore,
    now: DateTime<Utc>,
    salt: &str,
    request: Request,
) -> Result<Response, ApiError> {
    let presented = DeviceSecret::presented_hash(request.headers())?;
    let device = parse(request.body(), now)?;
    let secret = DeviceSecret::generate();
    let hash = device.device_id.log_hash(salt);
    let (issued, proven) = match store
        .register_device(&device, presented.as_deref(), &secret.hash())
        .await?
    {
        DeviceWrite::Written { issued, proven } => (issued, proven),
        DeviceWrite::Refused => {
            tracing::warn!(
                device = %hash,
                presented = presented.is_some(),
                "device registration refused: the device's secret was not presented"
            );
            return Err(ApiError::device_secret_required());
        }
    };
    tracing::info!(
        device = %hash,
        environment = device.environment.as_str(),
        secret_issued = issued,
        secret_proven = proven,
        "device registered"
    );
    Ok(json_response(
        StatusCode::OK,
        &DeviceView::of(&device, issued.then(|| secret.expose())),
    ))
}
