//! DynamoDB adapter (aws-sdk-dynamodb): the tables `DevicesTable`, `CallsTable` and
//! `AgentUsageTable` of `template.yaml`.
//!
//! Every rule of the [`Store`] port that needs atomicity is one conditional request, so
//! concurrent callers can never both win; a failed condition is an answer
//! (`Ok(false)`, `Exists`, `LimitReached`, ...), never an error. Items:
//!
//! - devices: `deviceId` S (key), `voipToken` S, `environment` S, `updatedAt` S, and the
//!   device secret's `secretHash` S, `secretProven` BOOL (`devices`).
//! - scheduledCalls: `deviceId` S (key), `callId` S, `scheduledAt` S (the client's offset kept),
//!   `scheduledAtMs` N, `dueShard` S (`<minute>#<shard>`, only while `scheduled`/`claimed`: the sparse
//!   [`DUE_INDEX`](super::DUE_INDEX)), `status` S, `callerName` S?, `createdAt` S, `updatedAt` S, `claimedAtMs` N?,
//!   `pushStartedAtMs` N?, `expireAt` N (TTL: `scheduledAt` + 8 days from creation, outcome + 7 days once terminal).
//! - agentUsage: `deviceId` S + `day` S (key), `useCount` N, `expireAt` N (TTL).
//!
//! Both of the last also hold items under prefixed keys (`keyed`): kept idempotent answers,
//! agent plans' answer counters and the APIs' daily token counts. Times are kept to the
//! millisecond (RFC 3339 with milliseconds, or epoch milliseconds); `scheduledAt` keeps the
//! client's text. Error messages carry the SDK's error context, never item contents.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use chrono::{DateTime, SecondsFormat, Utc};

use super::{
    CancelError, ClaimAnswer, CreateError, DeviceProof, IdempotentAnswer, Outcome, SpendOutcome,
    Store, StoreError, TableNames, UsageOutcome,
};
use crate::domain::device::{Device, DeviceId, VoipToken};
use crate::domain::due::{DueCall, shard_key, shard_of, shards_for};
use crate::domain::reservation::{
    CallId, Reservation, ReservationStatus, ScheduledAt, rfc3339_millis,
};

/// Whole-operation budget (all attempts): an outage answers 503 quickly instead of hanging.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(3);
/// One attempt (DynamoDB answers in milliseconds; a stuck connection is retried).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
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
const EXPIRE_AT: &str = "expireAt";
const DAY: &str = "day";
const USE_COUNT: &str = "useCount";

type Item = HashMap<String, AttributeValue>;

pub(crate) mod devices;
mod retried;
use devices::{WriteResult, device_from_item, device_item};
mod dispatch;
mod errors;
mod keyed;
use errors::{bad_item, condition_failed, sdk_error, written};

pub struct DynamoStore {
    client: Client,
    tables: TableNames,
}

impl DynamoStore {
    pub fn new(client: Client, tables: TableNames) -> DynamoStore {
        DynamoStore { client, tables }
    }

    /// A client from the environment (region, credentials, `AWS_ENDPOINT_URL_DYNAMODB`), with
    /// the SDK's standard retries (3 attempts) inside a short overall timeout.
    pub async fn from_env(tables: TableNames) -> DynamoStore {
        let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .http_client(crate::aws_http::sdk_http_client())
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

/// Reads attributes of one item, naming the table and attribute in errors.
struct Reader<'a> {
    table: &'a str,
    item: &'a Item,
}

impl<'a> Reader<'a> {
    fn opt_s(&self, name: &str) -> Result<Option<&'a str>, StoreError> {
        match self.item.get(name) {
            None => Ok(None),
            Some(AttributeValue::S(v)) => Ok(Some(v.as_str())),
            Some(_) => Err(bad_item(self.table, name)),
        }
    }

    fn s(&self, name: &str) -> Result<&'a str, StoreError> {
        self.opt_s(name)?.ok_or_else(|| bad_item(self.table, name))
    }

    fn opt_i64(&self, name: &str) -> Result<Option<i64>, StoreError> {
        match self.item.get(name) {
            None => Ok(None),
            Some(AttributeValue::N(v)) => v
                .parse::<i64>()
                .map(Some)
                .map_err(|_| bad_item(self.table, name)),
            Some(_) => Err(bad_item(self.table, name)),
        }
    }

    fn time(&self, name: &str) -> Result<DateTime<Utc>, StoreError> {
        DateTime::parse_from_rfc3339(self.s(name)?)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|_| bad_item(self.table, name))
    }

    fn opt_time_ms(&self, name: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        self.opt_i64(name)?
            .map(|ms| DateTime::from_timestamp_millis(ms).ok_or_else(|| bad_item(self.table, name)))
            .transpose()
    }
}

/// A new reservation's item, in its minute's shard `due_shard` of the bucket index.
fn reservation_item(r: &Reservation, due_shard: u32) -> Item {
    let mut item = HashMap::from([
        (DEVICE_ID.to_owned(), s(r.device_id.as_str())),
        (CALL_ID.to_owned(), s(r.call_id.as_str())),
        (
            SCHEDULED_AT.to_owned(),
            s(r.scheduled_at
                .with_offset()
                .to_rfc3339_opts(SecondsFormat::AutoSi, true)),
        ),
        (
            SCHEDULED_AT_MS.to_owned(),
            n(r.scheduled_at.utc().timestamp_millis()),
        ),
        (STATUS.to_owned(), s(r.status.as_str())),
        (CREATED_AT.to_owned(), s(rfc3339_millis(r.created_at))),
        (UPDATED_AT.to_owned(), s(rfc3339_millis(r.updated_at))),
    ]);
    let minute = r.scheduled_at.due_minute();
    item.insert(DUE_SHARD.to_owned(), s(shard_key(&minute, due_shard)));
    if let Some(name) = &r.caller_name {
        item.insert(CALLER_NAME.to_owned(), s(name.as_str()));
    }
    if let Some(claimed_at) = r.claimed_at {
        item.insert(CLAIMED_AT_MS.to_owned(), n(claimed_at.timestamp_millis()));
    }
    if let Some(started) = r.push_started_at {
        item.insert(PUSH_STARTED_AT_MS.to_owned(), n(started.timestamp_millis()));
    }
    if let Some(expire_at) = r.expire_at {
        item.insert(EXPIRE_AT.to_owned(), n(expire_at));
    }
    item
}

fn reservation_from_item(table: &str, item: &Item) -> Result<Reservation, StoreError> {
    let r = Reader { table, item };
    let scheduled_at = DateTime::parse_from_rfc3339(r.s(SCHEDULED_AT)?)
        .map_err(|_| bad_item(table, SCHEDULED_AT))?;
    Ok(Reservation {
        call_id: CallId::from_stored(r.s(CALL_ID)?.to_owned()),
        device_id: DeviceId::from_stored(r.s(DEVICE_ID)?.to_owned()),
        scheduled_at: ScheduledAt::from_stored(scheduled_at),
        status: ReservationStatus::from_stored(r.s(STATUS)?)
            .ok_or_else(|| bad_item(table, STATUS))?,
        caller_name: r.opt_s(CALLER_NAME)?.map(str::to_owned),
        created_at: r.time(CREATED_AT)?,
        updated_at: r.time(UPDATED_AT)?,
        claimed_at: r.opt_time_ms(CLAIMED_AT_MS)?,
        push_started_at: r.opt_time_ms(PUSH_STARTED_AT_MS)?,
        expire_at: r.opt_i64(EXPIRE_AT)?,
    })
}

#[async_trait]
impl Store for DynamoStore {
    async fn register_device(&self, d: &Device, p: Option<&str>, h: &str) -> WriteResult {
        self.register_device_item(d, p, h).await
    }

    async fn put_device(&self, device: &Device) -> Result<(), StoreError> {
        let table = &self.tables.devices;
        self.client
            .put_item()
            .table_name(table)
            .set_item(Some(device_item(device)))
            .send()
            .await
            .map_err(|e| sdk_error("PutItem", table, e))?;
        Ok(())
    }

    async fn get_device(&self, id: &DeviceId) -> Result<Option<Device>, StoreError> {
        let table = &self.tables.devices;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key(DEVICE_ID, s(id.as_str()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk_error("GetItem", table, e))?;
        out.item()
            .map(|item| device_from_item(table, item))
            .transpose()
    }

    async fn device_proof(&self, id: &DeviceId) -> Result<DeviceProof, StoreError> {
        self.device_proof_item(id).await
    }

    async fn remove_device(&self, id: &DeviceId, token: &VoipToken) -> Result<bool, StoreError> {
        let table = &self.tables.devices;
        let result = self
            .client
            .delete_item()
            .table_name(table)
            .key(DEVICE_ID, s(id.as_str()))
            .condition_expression("#voipToken = :token")
            .set_expression_attribute_names(Some(names(&[VOIP_TOKEN])))
            .expression_attribute_values(":token", s(token.expose()))
            .send()
            .await;
        written("DeleteItem", table, result)
    }

    async fn create_reservation(
        &self,
        reservation: &Reservation,
        now: DateTime<Utc>,
        stale_before: DateTime<Utc>,
    ) -> Result<(), CreateError> {
        let table = &self.tables.calls;
        // Counted first: a count a failed create leaves behind only means one shard too many.
        let minute = reservation.scheduled_at.due_minute();
        let count = self
            .count_due(&minute, reservation.expire_at.unwrap_or_default())
            .await?;
        let shard = shard_of(&reservation.call_id, shards_for(count));
        let result = self
            .client
            .put_item()
            .table_name(table)
            .set_item(Some(reservation_item(reservation, shard)))
            .condition_expression(
                "attribute_not_exists(#deviceId) OR #status IN (:sent, :failed, :missed) \
                 OR #expireAt <= :nowSecs OR #scheduledAtMs < :staleBeforeMs \
                 OR #callId = :callId",
            )
            .set_expression_attribute_names(Some(names(&[
                DEVICE_ID,
                STATUS,
                EXPIRE_AT,
                SCHEDULED_AT_MS,
                CALL_ID,
            ])))
            .set_expression_attribute_values(Some(values(vec![
                // This very reservation (a retry of this write): already created.
                (":callId", s(reservation.call_id.as_str())),
                (":sent", s(ReservationStatus::Sent.as_str())),
                (":failed", s(ReservationStatus::Failed.as_str())),
                (":missed", s(ReservationStatus::Missed.as_str())),
                (":nowSecs", n(now.timestamp())),
                (":staleBeforeMs", n(stale_before.timestamp_millis())),
            ])))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if condition_failed(&e) => Err(CreateError::Exists),
            Err(e) => Err(CreateError::Store(sdk_error("PutItem", table, e))),
        }
    }

    async fn get_reservation(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<Option<Reservation>, StoreError> {
        let table = &self.tables.calls;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key(DEVICE_ID, s(id.as_str()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk_error("GetItem", table, e))?;
        let Some(item) = out.item() else {
            return Ok(None);
        };
        let reservation = reservation_from_item(table, item)?;
        Ok((!reservation.is_expired(now)).then_some(reservation))
    }

    async fn cancel_reservation(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<(), CancelError> {
        let table = &self.tables.calls;
        let request = self
            .client
            .delete_item()
            .table_name(table)
            .key(DEVICE_ID, s(id.as_str()))
            .condition_expression(
                "#status = :scheduled AND (attribute_not_exists(#expireAt) OR #expireAt > :nowSecs)",
            )
            .set_expression_attribute_names(Some(names(&[STATUS, EXPIRE_AT])))
            .set_expression_attribute_values(Some(values(vec![
                (":scheduled", s(ReservationStatus::Scheduled.as_str())),
                (":nowSecs", n(now.timestamp())),
            ])))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let (result, unanswered) = retried::send_delete(request).await;
        let err = match result {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        let old = match err.as_service_error() {
            Some(DeleteItemError::ConditionalCheckFailedException(failed)) => failed.item(),
            _ => return Err(CancelError::Store(sdk_error("DeleteItem", table, err))),
        };
        // No item: there was none, or an earlier attempt whose reply was lost deleted it.
        let Some(old) = old else {
            return unanswered.then_some(()).ok_or(CancelError::NotFound);
        };
        let existing = reservation_from_item(table, old)?;
        if existing.is_expired(now) {
            Err(CancelError::NotFound)
        } else {
            Err(CancelError::TooLate(existing.status))
        }
    }

    async fn due_count(&self, minute: &str) -> Result<u32, StoreError> {
        self.due_count_item(minute).await
    }

    async fn due_calls(&self, minute: &str, shard: u32) -> Result<Vec<DueCall>, StoreError> {
        self.due_calls_item(minute, shard).await
    }

    async fn claim_due(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        now: DateTime<Utc>,
        abandoned_before: DateTime<Utc>,
    ) -> Result<ClaimAnswer, StoreError> {
        self.claim_due_item(id, call_id, now, abandoned_before)
            .await
    }

    async fn mark_push_started(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        claimed_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.mark_item(id, call_id, claimed_at, now).await
    }

    async fn finish_reservation(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        outcome: Outcome,
        now: DateTime<Utc>,
        abandoned_before: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.finish_item(id, call_id, outcome, now, abandoned_before)
            .await
    }

    async fn count_agent_use(
        &self,
        id: &DeviceId,
        day: &str,
        limit: u32,
        expire_at: i64,
    ) -> Result<UsageOutcome, StoreError> {
        self.count(id.as_str(), day, limit, expire_at).await
    }

    async fn count_plan_answer(
        &self,
        plan_id: &str,
        limit: u32,
        expire_at: i64,
    ) -> Result<UsageOutcome, StoreError> {
        self.count_plan(plan_id, limit, expire_at).await
    }

    async fn reserve_tokens(
        &self,
        api: &str,
        day: &str,
        tokens: u64,
        ceiling: u64,
        expire_at: i64,
    ) -> Result<SpendOutcome, StoreError> {
        self.reserve(api, day, tokens, ceiling, expire_at).await
    }

    async fn settle_tokens(
        &self,
        api: &str,
        day: &str,
        delta: i64,
        expire_at: i64,
    ) -> Result<(), StoreError> {
        self.settle(api, day, delta, expire_at).await
    }

    async fn claim_ceiling_notice(
        &self,
        api: &str,
        day: &str,
        expire_at: i64,
    ) -> Result<bool, StoreError> {
        self.notice(api, day, expire_at).await
    }

    async fn idempotent_answer(
        &self,
        key: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<IdempotentAnswer>, StoreError> {
        self.kept_answer(key, now).await
    }

    async fn keep_idempotent_answer(
        &self,
        answer: &IdempotentAnswer,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.keep_answer(answer, now).await
    }
}
