//! The one error type every handler returns, rendered as the contract's union error body, and
//! how a refused domain field becomes one (the store's and the model provider's errors become one
//! beside their types: `store/error.rs`, `model/mod.rs`).

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use serde::Serialize;

use crate::domain::Invalid;

use super::Response;

/// Every error code the API can answer with. `as_str` is the wire value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    InvalidRequest,
    Unauthorized,
    DeviceSecretRequired,
    NotFound,
    MethodNotAllowed,
    ReservationExists,
    DeviceNotRegistered,
    TooLate,
    IdempotencyKeyReused,
    ReservationGone,
    DailyLimitExceeded,
    ProviderNotConfigured,
    ProviderTimeout,
    ProviderError,
    ProviderBadResponse,
    InsufficientCredits,
    TestError,
    InternalError,
    ServiceUnavailable,
    SpendCeilingReached,
}

impl ErrorCode {
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::InvalidRequest,
        ErrorCode::Unauthorized,
        ErrorCode::DeviceSecretRequired,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::ReservationExists,
        ErrorCode::DeviceNotRegistered,
        ErrorCode::TooLate,
        ErrorCode::IdempotencyKeyReused,
        ErrorCode::ReservationGone,
        ErrorCode::DailyLimitExceeded,
        ErrorCode::ProviderNotConfigured,
        ErrorCode::ProviderTimeout,
        ErrorCode::ProviderError,
        ErrorCode::ProviderBadResponse,
        ErrorCode::InsufficientCredits,
        ErrorCode::TestError,
        ErrorCode::InternalError,
        ErrorCode::ServiceUnavailable,
        ErrorCode::SpendCeilingReached,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "INVALID_REQUEST",
            ErrorCode::Unauthorized => "UNAUTHORIZED",
            ErrorCode::DeviceSecretRequired => "DEVICE_SECRET_REQUIRED",
            ErrorCode::ReservationExists => "RESERVATION_EXISTS",
            ErrorCode::DeviceNotRegistered => "DEVICE_NOT_REGISTERED",
            ErrorCode::TooLate => "TOO_LATE",
            ErrorCode::IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
            ErrorCode::ReservationGone => "RESERVATION_GONE",
            ErrorCode::DailyLimitExceeded => "DAILY_LIMIT_EXCEEDED",
            ErrorCode::ServiceUnavailable => "SERVICE_UNAVAILABLE",
            ErrorCode::SpendCeilingReached => "SPEND_CEILING_REACHED",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            ErrorCode::ProviderNotConfigured => "PROVIDER_NOT_CONFIGURED",
            ErrorCode::ProviderTimeout => "PROVIDER_TIMEOUT",
            ErrorCode::ProviderError => "PROVIDER_ERROR",
            ErrorCode::ProviderBadResponse => "PROVIDER_BAD_RESPONSE",
            ErrorCode::InsufficientCredits => "INSUFFICIENT_CREDITS",
            ErrorCode::TestError => "TEST_ERROR",
            ErrorCode::InternalError => "INTERNAL_ERROR",
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::InvalidRequest => StatusCode::BAD_REQUEST,
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::DeviceSecretRequired => StatusCode::FORBIDDEN,
            ErrorCode::ReservationExists
            | ErrorCode::DeviceNotRegistered
            | ErrorCode::TooLate
            | ErrorCode::IdempotencyKeyReused
            | ErrorCode::ReservationGone => StatusCode::CONFLICT,
            ErrorCode::DailyLimitExceeded => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::ServiceUnavailable | ErrorCode::SpendCeilingReached => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::ProviderNotConfigured
            | ErrorCode::ProviderTimeout
            | ErrorCode::ProviderError
            | ErrorCode::ProviderBadResponse
            | ErrorCode::InsufficientCredits
            | ErrorCode::TestError
            | ErrorCode::InternalError => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// An error answer: a code, a message that names the offending field (never its value), and any
/// headers the answer needs (`Retry-After`, `Allow`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// What went wrong inside, for the log line the service writes when it answers (never
    /// rendered into the body): what failed, and the lower layer's error text.
    pub cause: Option<(&'static str, String)>,
    /// Whether a 5xx answer publishes an error notification (all do, but the refusals past a
    /// spend ceiling after the first: one notice a day, not one per refused call).
    pub notify: bool,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            headers: Vec::new(),
            cause: None,
            notify: true,
        }
    }

    /// 403 `DEVICE_SECRET_REQUIRED` of `PUT /devices` and `/calls` (the agent says its own).
    pub fn device_secret_required() -> Self {
        ApiError::new(
            ErrorCode::DeviceSecretRequired,
            "X-Device-Secret is missing or not this device's: send the deviceSecret a PUT /devices answered",
        )
    }

    /// 400 INVALID_REQUEST: `"{field} {problem}"`, e.g. `messages[2].role must be one of ...`.
    pub fn invalid(field: impl std::fmt::Display, problem: impl std::fmt::Display) -> Self {
        ApiError::new(ErrorCode::InvalidRequest, format!("{field} {problem}"))
    }

    pub fn internal() -> Self {
        ApiError::new(ErrorCode::InternalError, "internal error")
    }

    /// The invocation's deadline came before the handler was done (a slow dependency): 503
    /// with `Retry-After`, while there is still time to answer (`crate::platform::deadline`).
    pub fn deadline() -> Self {
        ApiError::unavailable(
            "the request could not be finished in time (a dependency is slow); retry later",
        )
        .caused_by(
            "deadline reached",
            "the handler was not done before the invocation's deadline",
        )
    }

    /// 503 SERVICE_UNAVAILABLE with `Retry-After` ([`RETRY_AFTER_SECS`]): a dependency (the
    /// store, the deadline's) could not answer now; a retry may.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::ServiceUnavailable, message).with_header(
            http::header::RETRY_AFTER,
            HeaderValue::from(RETRY_AFTER_SECS),
        )
    }

    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    /// Records what failed inside, logged (at error level) when the answer goes out.
    pub fn caused_by(mut self, what: &'static str, detail: impl std::fmt::Display) -> Self {
        self.cause = Some((what, detail.to_string()));
        self
    }

    pub fn status(&self) -> StatusCode {
        self.code.status()
    }

    /// The contract's error body: `{"code", "message", "error"}`, `error` equal to `message`.
    pub fn body(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Body<'a> {
            code: &'a str,
            message: &'a str,
            error: &'a str,
        }
        serde_json::to_vec(&Body {
            code: self.code.as_str(),
            message: &self.message,
            error: &self.message,
        })
        .expect("error body serializes")
    }

    pub fn into_response(self) -> Response {
        let body = self.body();
        let mut response = http::Response::builder()
            .status(self.status())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Bytes::from(body))
            .expect("static response parts are valid");
        for (name, value) in self.headers {
            response.headers_mut().append(name, value);
        }
        response
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for ApiError {}

/// A refused field: 400 INVALID_REQUEST naming it.
impl From<Invalid> for ApiError {
    fn from(e: Invalid) -> ApiError {
        ApiError::invalid(e.field, e.problem)
    }
}

/// What a 503 for a slow or failing store asks a client to wait before it retries.
pub const RETRY_AFTER_SECS: u64 = 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_body_is_the_union_of_both_shapes() {
        let response =
            ApiError::invalid("messages[2].role", "must be one of system, user, assistant")
                .into_response();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(body["code"], "INVALID_REQUEST");
        assert_eq!(
            body["message"],
            "messages[2].role must be one of system, user, assistant"
        );
        assert_eq!(body["error"], body["message"]);
        assert_eq!(
            response.headers()[http::header::CONTENT_TYPE],
            "application/json"
        );
    }

    #[test]
    fn codes_are_distinct_screaming_snake_case() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            let s = code.as_str();
            assert!(seen.insert(s), "{s} twice");
            assert!(s.chars().all(|c| c.is_ascii_uppercase() || c == '_'));
        }
    }
}
