//! The DynamoDB adapter's errors: an SDK failure as a store error (its context, never item
//! contents), an unreadable item, and a conditional write's answer.

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};

use super::Item;

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

/// A conditional UpdateItem's answer: `Ok` with the attributes it returned (as its
/// `return_values` asked), or `Err` if its condition failed, with the item as it was (as
/// `ReturnValuesOnConditionCheckFailure::AllOld` asks; `None`: there was none); any other
/// failure is a store error.
pub(super) fn answered<R: std::fmt::Debug>(
    table: &str,
    result: Result<UpdateItemOutput, SdkError<UpdateItemError, R>>,
) -> Result<Result<Item, Option<Item>>, StoreError> {
    let err = match result {
        Ok(out) => return Ok(Ok(out.attributes.unwrap_or_default())),
        Err(err) => err,
    };
    match err.as_service_error() {
        Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
            Ok(Err(failed.item().cloned()))
        }
        _ => Err(sdk_error("UpdateItem", table, err)),
    }
}
