//! DynamoDB adapter (aws-sdk-dynamodb): the tables `DevicesTable`, `CallsTable` and
//! `AgentUsageTable` of `template.yaml`.
//!
//! Every rule of the [`Store`](super::Store) port that needs atomicity is one conditional
//! request, so concurrent callers can never both win; a failed condition is an answer
//! (`Ok(false)`, `Exists`, `LimitReached`, ...), never an error. Each port is implemented in its
//! file: devices (`devices`), reservations (`reservations`; the confirmation's update in
//! `outcome`), the dispatcher's requests and the minute's watch (`dispatch`), counters and kept
//! answers (`keyed`). Items:
//!
//! - devices: `deviceId` S (key), `voipToken` S, `environment` S, `updatedAt` S, and the
//!   device secret's `secretHash` S, `secretProven` BOOL (`devices`).
//! - scheduledCalls: `deviceId` S (key), `callId` S, `scheduledAt` S (the client's offset kept),
//!   `scheduledAtMs` N, `dueShard` S (`<minute>#<shard>`, only while `scheduled`/`claimed` or a notice is released: the sparse
//!   [`DUE_INDEX`](super::DUE_INDEX)), `status` S, `callerName` S?, `createdAt` S, `updatedAt` S, `claimedAtMs` N?,
//!   `pushStartedAtMs` N?, `expireAt` N (TTL: `scheduledAt` + 8 days from creation, outcome + 7 days once terminal),
//!   `noticeShard` S (the `dueShard` it was put in, kept for its notice's release),
//!   `noticeClaim` S?, `noticeSentAtMs` N?, `noticeRetry` BOOL?.
//! - agentUsage: `deviceId` S + `day` S (key), `useCount` N, `expireAt` N (TTL).
//!
//!   Also under prefixed keys: `due#<minute>` (`count` N: the reservations stored for that
//!   minute; `watchedUntil` N: a run's promise to select the minute until then, `dispatch`, and
//!   `wakeClaimant` S: the create that claimed its wake) and
//!   `cancelled#<callId>` (a cancelled call's tombstone, `expireAt` only).
//!
//! Both of the last also hold `keyed` items: kept idempotent answers, agent plans' answer
//! counters, the APIs' daily token counts. Times are kept to the millisecond; `scheduledAt`
//! keeps the client's text. Error messages carry the SDK's error context, never item contents.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::types::AttributeValue;

use super::TableNames;

/// Whole-operation budget (all attempts): an outage answers 503 quickly instead of hanging.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(3);
/// One attempt (DynamoDB answers in milliseconds; a stuck connection is retried).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
/// The dispatcher's requests on a call (device read, claim, push mark, release, outcome): one
/// attempt each, cut off at this, and no SDK retries: the dispatcher makes an unanswered request
/// again itself, at once and until its call's deadline (`dispatch::RESOLVE_BUDGET`), so a reply
/// lost or held up costs about this much lateness, not a second's backoff or the call
/// (docs/reliability.md, "Timeouts" has the figures it is chosen from).
pub const DISPATCH_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(500);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

// Attribute names.
const DEVICE_ID: &str = "deviceId";
const VOIP_TOKEN: &str = "voipToken";
const ENVIRONMENT: &str = "environment";
const UPDATED_AT: &str = "updatedAt";
const CALL_ID: &str = "callId";
const SCHEDULED_AT: &str = "scheduledAt";
const SCHEDULED_AT_MS: &str = "scheduledAtMs";
const DUE_SHARD: &str = "dueShard";
const STATUS: &str = "status";
const CALLER_NAME: &str = "callerName";
const CREATED_AT: &str = "createdAt";
const CLAIMED_AT_MS: &str = "claimedAtMs";
const PUSH_STARTED_AT_MS: &str = "pushStartedAtMs";
/// N: the batch (its start, a tenth of a second) whose mark stands for the claim's push mark
/// (`ClaimMark::InBatch`).
const MARK_BATCH_MS: &str = "markBatchMs";
const EXPIRE_AT: &str = "expireAt";
/// N, absent while 0: the pushes that left for a reservation.
const PUSHES: &str = "pushes";
/// BOOL, present only when true: the push being made is to a device that confirms its calls.
const CONFIRMS: &str = "confirms";
/// N: when the device confirmed a push (`rang`).
const RANG_AT_MS: &str = "rangAtMs";
/// S: the token of the run that claimed the call's missed-call notice.
const NOTICE_CLAIM: &str = "noticeClaim";
/// N: when the missed-call notice left.
const NOTICE_SENT_AT_MS: &str = "noticeSentAtMs";
/// S: the `dueShard` the reservation was put in, kept after it leaves the index (written with
/// it at creation, so that keeping it costs no write): where its notice's release puts it back.
const NOTICE_SHARD: &str = "noticeShard";
/// BOOL, present only when true: the notice was released for a later run and the call is back
/// in the bucket index (`dueShard` set again) until a run claims the notice.
const NOTICE_RETRY: &str = "noticeRetry";
const DAY: &str = "day";
const USE_COUNT: &str = "useCount";

type Item = HashMap<String, AttributeValue>;

mod conditions;
pub(crate) mod devices;
mod dispatch;
mod errors;
mod items;
mod keyed;
mod outcome;
mod requests;
mod reservations;
mod retried;
use errors::{bad_item, condition_failed, sdk_error, written};
use items::{Reader, reservation_from_item};
use requests::{answered, call_values, offer, read_item, update_item};
use retried::{CLAIM_TOKEN, FINISH_TOKEN};

pub struct DynamoStore {
    client: Client,
    /// The same client (and connections) with the dispatcher's timing: one attempt of at most
    /// [`DISPATCH_ATTEMPT_TIMEOUT`], for the dispatcher's own requests (`DispatchStore`).
    dispatch: Client,
    /// What `get_device` reads through: `client` (the SDK's retries), unless this is the
    /// dispatcher's store ([`DynamoStore::for_dispatcher`]). `get_device` is a `DeviceStore`
    /// read any endpoint may make, so it must not fail on one lost reply by default.
    device_reads: Client,
    tables: TableNames,
}

impl DynamoStore {
    /// The endpoints' store: every request with the SDK's retries (3 attempts within
    /// [`OPERATION_TIMEOUT`]), except the dispatcher's own (`DispatchStore`), which only it makes.
    pub fn new(client: Client, tables: TableNames) -> DynamoStore {
        let dispatch = Client::from_conf(
            client
                .config()
                .to_builder()
                .retry_config(RetryConfig::disabled())
                .timeout_config(
                    aws_config::timeout::TimeoutConfig::builder()
                        .connect_timeout(DISPATCH_ATTEMPT_TIMEOUT)
                        .operation_attempt_timeout(DISPATCH_ATTEMPT_TIMEOUT)
                        .operation_timeout(DISPATCH_ATTEMPT_TIMEOUT)
                        .build(),
                )
                .build(),
        );
        DynamoStore {
            device_reads: client.clone(),
            client,
            dispatch,
            tables,
        }
    }

    /// The dispatcher's store (the same clients and connections): its device reads too are one
    /// attempt of at most [`DISPATCH_ATTEMPT_TIMEOUT`], since the dispatcher makes an unanswered
    /// request again itself, at once, within its call's deadline.
    pub fn for_dispatcher(&self) -> DynamoStore {
        DynamoStore {
            client: self.client.clone(),
            dispatch: self.dispatch.clone(),
            device_reads: self.dispatch.clone(),
            tables: self.tables.clone(),
        }
    }

    /// A client from the environment (region, credentials, `AWS_ENDPOINT_URL_DYNAMODB`), with
    /// the SDK's standard retries (3 attempts) inside a short overall timeout.
    pub async fn from_env(tables: TableNames) -> DynamoStore {
        let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .http_client(crate::platform::aws_http::sdk_http_client())
            .timeout_config(DynamoStore::timeouts())
            .load()
            .await;
        DynamoStore::new(Client::new(&config), tables)
    }

    /// The client timeouts `from_env` uses (tests build their clients with them too).
    pub fn timeouts() -> aws_config::timeout::TimeoutConfig {
        aws_config::timeout::TimeoutConfig::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .operation_attempt_timeout(ATTEMPT_TIMEOUT)
            .operation_timeout(OPERATION_TIMEOUT)
            .build()
    }

    pub fn tables(&self) -> &TableNames {
        &self.tables
    }
}

// ---------------------------------------------------------------------------------------------
// Attribute values

fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

fn n(value: impl std::fmt::Display) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// `#name` → name for every attribute used in an expression.
fn names(list: &[&str]) -> HashMap<String, String> {
    list.iter()
        .map(|name| (format!("#{name}"), (*name).to_owned()))
        .collect()
}

fn values(list: Vec<(&str, AttributeValue)>) -> HashMap<String, AttributeValue> {
    list.into_iter()
        .map(|(placeholder, value)| (placeholder.to_owned(), value))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::config::{BehaviorVersion, Region};

    fn store() -> DynamoStore {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("ap-northeast-1"))
            .retry_config(RetryConfig::standard())
            .timeout_config(DynamoStore::timeouts())
            .build();
        DynamoStore::new(Client::from_conf(config), TableNames::default())
    }

    fn attempts(client: &Client) -> u32 {
        client.config().retry_config().unwrap().max_attempts()
    }

    fn operation_timeout(client: &Client) -> Option<Duration> {
        client
            .config()
            .timeout_config()
            .unwrap()
            .operation_timeout()
    }

    /// An endpoint reading a device (the store `new` builds) gets the SDK's retries; only the
    /// dispatcher's store reads it once, as it makes its own requests.
    #[test]
    fn device_reads_are_retried_except_on_the_dispatchers_store() {
        let endpoints = store();
        assert_eq!(attempts(&endpoints.device_reads), 3);
        assert_eq!(
            operation_timeout(&endpoints.device_reads),
            Some(OPERATION_TIMEOUT)
        );
        let dispatcher = endpoints.for_dispatcher();
        assert_eq!(attempts(&dispatcher.device_reads), 1);
        assert_eq!(
            operation_timeout(&dispatcher.device_reads),
            Some(DISPATCH_ATTEMPT_TIMEOUT)
        );
        // Everything else each store does stays as it was: the dispatcher's own requests once,
        // the rest retried.
        for store in [&endpoints, &dispatcher] {
            assert_eq!(attempts(&store.client), 3);
            assert_eq!(attempts(&store.dispatch), 1);
        }
    }
}
