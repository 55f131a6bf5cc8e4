//! The DynamoDB adapter's errors: an SDK failure as a store error (its context, never item
//! contents), an unreadable item, and a conditional write's answer.

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use crate::store::StoreError;

/// Any SDK failure other than a failed condition. Never called with a conditional-check
/// failure (whose response may carry the item).
pub(super) fn sdk_error<E, R>(operation: &str, table: &str, err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let message = format!(
        "DynamoDB {operation} on {table} failed: {}",
        DisplayErrorContext(&err)
    );
    let code = err.as_service_error().and_then(|e| e.code());
    match code {
        Some(code) if THROTTLING.contains(&code) => StoreError::throttled(message),
        _ => StoreError::new(message),
    }
}

/// DynamoDB's answers for want of capacity (a partition's or the table's throughput, the
/// account's request rate).
const THROTTLING: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
];

/// A stored record that cannot be read back (names the attribute, never its value).
pub(super) fn bad_item(table: &str, attribute: &str) -> StoreError {
    StoreError::new(format!(
        "DynamoDB item in {table} has a missing or invalid `{attribute}`"
    ))
}

/// The request's condition was false (an answer, not a failure).
pub(super) fn condition_failed<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> bool {
    err.as_service_error().and_then(|e| e.code()) == Some("ConditionalCheckFailedException")
}

/// A conditional write's answer: whether its condition held (a failed condition is an answer);
/// any other failure a store error.
pub(super) fn written<T, E, R>(
    operation: &str,
    table: &str,
    result: Result<T, SdkError<E, R>>,
) -> Result<bool, StoreError>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match result {
        Ok(_) => Ok(true),
        Err(e) if condition_failed(&e) => Ok(false),
        Err(e) => Err(sdk_error(operation, table, e)),
    }
}
