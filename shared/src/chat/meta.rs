//! GET /health, GET /api/info and GET /api/error.

use http::StatusCode;
use serde::Serialize;

use crate::platform::config::InfoConfig;
use crate::platform::error::{ApiError, ErrorCode};
use crate::platform::{Response, json_response};

pub fn health() -> Response {
    json_response(StatusCode::OK, &serde_json::json!({"status": "ok"}))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AppInfo<'a> {
    maintenance: bool,
    minimum_version: &'a str,
    message: Option<&'a str>,
}

pub fn info(config: &InfoConfig) -> Response {
    json_response(
        StatusCode::OK,
        &AppInfo {
            maintenance: config.maintenance,
            minimum_version: &config.minimum_version,
            message: config.message.as_deref(),
        },
    )
}

/// Always fails, so the team can see a notification reach their chat.
pub fn error_test() -> ApiError {
    ApiError::new(
        ErrorCode::TestError,
        "deliberate test error: an error notification was published",
    )
}
