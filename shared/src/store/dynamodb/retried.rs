//! Exactly once when a reply is lost: the SDK (or the caller) makes a write again whose reply did
//! not arrive, and the new attempt's condition then meets the item its first attempt wrote. The
//! dispatcher's claim, push mark, release and outcome carry the token of the run that makes them
//! (`claimToken`, `finishToken`: `RunToken`, one per run), and each condition also accepts the
//! item that run already wrote, so a write made again is recognised as this run's while another
//! run's is refused as before. A create recognises its own `callId` (random per reservation)
//! the same way; a counter's `ADD` its own `lastAdd` token (`keyed.rs`).
//! `shared/tests/it/faults_lost_replies.rs` and `faults_slow_replies.rs` lose and hold real
//! replies of DynamoDB Local.

pub(super) const CLAIM_TOKEN: &str = "claimToken";
pub(super) const FINISH_TOKEN: &str = "finishToken";

/// A token for one counter's `ADD` (`keyed.rs`), the same in the SDK's retries of that call.
pub(super) fn write_token() -> String {
    format!("{:016x}", fastrand::u64(..))
}

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::builders::DeleteItemFluentBuilder;
use aws_sdk_dynamodb::operation::delete_item::{DeleteItemError, DeleteItemOutput};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;

/// Attempts of a DeleteItem sent by [`send_delete`] (as the SDK's standard retries).
const DELETE_ATTEMPTS: u32 = 3;

/// A delete cannot leave a token on the item it removes, so [`send_delete`] makes its attempts
/// itself (the SDK's retries off for it): it then knows whether an earlier attempt went
/// unanswered (timed out, connection lost), after which "no item" most likely means that attempt
/// deleted it. The second value says so. (A connection refused before sending counts too: a
/// cancel of a reservation that never existed may then answer 204 instead of 404, which is
/// harmless.)
pub(super) async fn send_delete(
    request: DeleteItemFluentBuilder,
) -> (
    Result<DeleteItemOutput, SdkError<DeleteItemError, HttpResponse>>,
    bool,
) {
    // Within the operation's budget, as the SDK's own retries are.
    let deadline = tokio::time::Instant::now() + super::OPERATION_TIMEOUT;
    let mut unanswered = false;
    for attempt in 1..=DELETE_ATTEMPTS {
        let result = request
            .clone()
            .customize()
            .config_override(
                aws_sdk_dynamodb::config::Builder::default().retry_config(RetryConfig::disabled()),
            )
            .send()
            .await;
        let lost = matches!(
            result,
            Err(SdkError::DispatchFailure(_)
                | SdkError::TimeoutError(_)
                | SdkError::ResponseError(_))
        );
        let throttled = matches!(&result, Err(SdkError::ServiceError(e))
            if e.raw().status().as_u16() >= 500
                || aws_sdk_dynamodb::error::ProvideErrorMetadata::code(e.err())
                    .is_some_and(|c| c.contains("Throttl") || c.contains("ProvisionedThroughput")));
        // The SDK's standard backoff, roughly: up to 50 ms, then 100 ms, with jitter.
        let pause = std::time::Duration::from_millis(fastrand::u64(1..=50u64 << (attempt - 1)));
        let no_time = tokio::time::Instant::now() + pause + super::ATTEMPT_TIMEOUT > deadline;
        if attempt == DELETE_ATTEMPTS || !(lost || throttled) || no_time {
            return (result, unanswered);
        }
        unanswered |= lost;
        tokio::time::sleep(pause).await;
    }
    unreachable!("the last attempt returns")
}
