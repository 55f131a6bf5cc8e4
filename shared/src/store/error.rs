//! The store's one error: it could not answer (with whether it was throttling).

use crate::platform::error::ApiError;

/// The store could not answer (outage, throttling, bad data). Handlers answer 503.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError {
    pub message: String,
    /// The store refused for want of capacity (DynamoDB's throttling answers): counted in the
    /// dispatcher's `StoreThrottles` metric.
    pub throttled: bool,
}

impl StoreError {
    pub fn new(message: impl Into<String>) -> StoreError {
        StoreError {
            message: message.into(),
            throttled: false,
        }
    }

    /// A refusal for want of capacity.
    pub fn throttled(message: impl Into<String>) -> StoreError {
        StoreError {
            message: message.into(),
            throttled: true,
        }
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StoreError {}

/// The store failed (outage, throttling, the deadline): 503 with `Retry-After`. The cause is logged when the answer goes out.
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        ApiError::unavailable("the data store is unavailable; retry later")
            .caused_by("store unavailable", e)
    }
}
