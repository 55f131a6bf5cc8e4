//! The DynamoDB adapter's dispatch requests: a minute's reservation count, the shard query, the
//! claim, the mark that a push started, and the outcome (tokens against lost replies: `retried`).

use chrono::{DateTime, Utc};

use super::retried::{CLAIM_TOKEN, FINISH_TOKEN, write_token};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};

use super::{
    CALL_ID, CALLER_NAME, CLAIMED_AT_MS, DEVICE_ID, DUE_SHARD, DynamoStore, EXPIRE_AT, Item,
    PUSH_STARTED_AT_MS, Reader, SCHEDULED_AT, STATUS, UPDATED_AT, bad_item, n, names,
    reservation_from_item, s, sdk_error, values, written,
};
use crate::domain::device::DeviceId;
use crate::domain::due::{DueCall, shard_key};
use crate::domain::reservation::{
    CallId, ReservationStatus, ScheduledAt, rfc3339_millis, terminal_expiry,
};
use crate::store::{ClaimAnswer, DUE_INDEX, Outcome, StoreError};

/// The key prefix (in `deviceId`) of a minute's reservation count, `due#2026-01-01T22:00Z`.
const DUE_COUNT_PREFIX: &str = "due#";
const DUE_COUNT: &str = "count";

fn due_call_from_item(table: &str, item: &Item) -> Result<DueCall, StoreError> {
    let r = Reader { table, item };
    let scheduled_at = chrono::DateTime::parse_from_rfc3339(r.s(SCHEDULED_AT)?)
        .map_err(|_| bad_item(table, SCHEDULED_AT))?;
    Ok(DueCall {
        call_id: CallId::from_stored(r.s(CALL_ID)?.to_owned()),
        device_id: DeviceId::from_stored(r.s(DEVICE_ID)?.to_owned()),
        scheduled_at: ScheduledAt::from_stored(scheduled_at),
        caller_name: r.opt_s(CALLER_NAME)?.map(str::to_owned),
    })
}

/// The condition under which a reservation may be claimed (or marked missed): still
/// `scheduled`, or `claimed` before `:abandonedBeforeMs` (the claiming run died) and its push
/// never started (no `pushStartedAtMs`: a started push may have left).
const CLAIMABLE: &str = "#callId = :callId AND (#status = :scheduled OR \
     (#status = :claimed AND #claimedAtMs < :abandonedBeforeMs \
      AND attribute_not_exists(#pushStartedAtMs)))";

impl DynamoStore {
    /// `due#<minute>` in the calls table: the minute's count of reservations made for it.
    pub(super) async fn due_count_item(&self, minute: &str) -> Result<u32, StoreError> {
        let table = &self.tables.calls;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key(DEVICE_ID, s(format!("{DUE_COUNT_PREFIX}{minute}")))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk_error("GetItem", table, e))?;
        let Some(item) = out.item() else {
            return Ok(0);
        };
        let count = Reader { table, item }.opt_i64(DUE_COUNT)?.unwrap_or(0);
        Ok(u32::try_from(count).unwrap_or(u32::MAX))
    }

    /// Counts one more reservation made for `minute` (its TTL `expire_at`); the new count.
    pub(super) async fn count_due(&self, minute: &str, expire_at: i64) -> Result<u32, StoreError> {
        let table = &self.tables.calls;
        let out = self
            .client
            .update_item()
            .table_name(table)
            .key(DEVICE_ID, s(format!("{DUE_COUNT_PREFIX}{minute}")))
            .update_expression("ADD #count :one SET #expireAt = :expireAt")
            .set_expression_attribute_names(Some(names(&[DUE_COUNT, EXPIRE_AT])))
            .set_expression_attribute_values(Some(values(vec![
                (":one", n(1)),
                (":expireAt", n(expire_at)),
            ])))
            .return_values(ReturnValue::UpdatedNew)
            .send()
            .await
            .map_err(|e| sdk_error("UpdateItem", table, e))?;
        let count = out
            .attributes()
            .and_then(|a| a.get(DUE_COUNT))
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<u32>().ok())
            .ok_or_else(|| bad_item(table, DUE_COUNT))?;
        Ok(count)
    }

    pub(super) async fn due_calls_item(
        &self,
        minute: &str,
        shard: u32,
    ) -> Result<Vec<DueCall>, StoreError> {
        let table = &self.tables.calls;
        let mut due = Vec::new();
        let mut start_key: Option<Item> = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(table)
                .index_name(DUE_INDEX)
                .key_condition_expression("#dueShard = :shard")
                .set_expression_attribute_names(Some(names(&[DUE_SHARD])))
                .set_expression_attribute_values(Some(values(vec![(
                    ":shard",
                    s(shard_key(minute, shard)),
                )])))
                .scan_index_forward(true)
                .set_exclusive_start_key(start_key.take())
                .send()
                .await
                .map_err(|e| sdk_error("Query", table, e))?;
            for item in out.items() {
                due.push(due_call_from_item(table, item)?);
            }
            match out.last_evaluated_key() {
                Some(key) if !key.is_empty() => start_key = Some(key.clone()),
                _ => break,
            }
        }
        Ok(due)
    }

    pub(super) async fn claim_due_item(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        now: DateTime<Utc>,
        abandoned_before: DateTime<Utc>,
    ) -> Result<ClaimAnswer, StoreError> {
        let table = &self.tables.calls;
        let result = self
            .client
            .update_item()
            .table_name(table)
            .key(DEVICE_ID, s(id.as_str()))
            .update_expression(
                "SET #status = :claimed, #claimedAtMs = :nowMs, #updatedAt = :updatedAt, \
                 #claimToken = :token",
            )
            .condition_expression(format!(
                "({CLAIMABLE}) OR (#callId = :callId AND #status = :claimed AND #claimToken = :token)"
            ))
            .set_expression_attribute_names(Some(names(&[
                CALL_ID,
                STATUS,
                CLAIMED_AT_MS,
                UPDATED_AT,
                CLAIM_TOKEN,
                PUSH_STARTED_AT_MS,
            ])))
            .set_expression_attribute_values(Some(values(vec![
                (":callId", s(call_id.as_str())),
                (":scheduled", s(ReservationStatus::Scheduled.as_str())),
                (":claimed", s(ReservationStatus::Claimed.as_str())),
                (":abandonedBeforeMs", n(abandoned_before.timestamp_millis())),
                (":nowMs", n(now.timestamp_millis())),
                (":updatedAt", s(rfc3339_millis(now))),
                (":token", s(write_token())),
            ])))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let err = match result {
            Ok(_) => return Ok(ClaimAnswer::Won),
            Err(err) => err,
        };
        let current = match err.as_service_error() {
            Some(UpdateItemError::ConditionalCheckFailedException(failed)) => failed.item(),
            _ => return Err(sdk_error("UpdateItem", table, err)),
        };
        let current = match current {
            Some(item) => Some(reservation_from_item(table, item)?),
            None => None,
        };
        Ok(ClaimAnswer::Refused(current.filter(|r| !r.is_expired(now))))
    }

    pub(super) async fn mark_item(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        claimed_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let table = &self.tables.calls;
        // Idempotent: an SDK retry after a lost reply meets its own claim and sets the same value.
        let result = self
            .client
            .update_item()
            .table_name(table)
            .key(DEVICE_ID, s(id.as_str()))
            .update_expression("SET #pushStartedAtMs = :nowMs")
            .condition_expression(
                "#callId = :callId AND #status = :claimed AND #claimedAtMs = :claimedAtMs",
            )
            .set_expression_attribute_names(Some(names(&[
                CALL_ID,
                STATUS,
                CLAIMED_AT_MS,
                PUSH_STARTED_AT_MS,
            ])))
            .set_expression_attribute_values(Some(values(vec![
                (":callId", s(call_id.as_str())),
                (":claimed", s(ReservationStatus::Claimed.as_str())),
                (":claimedAtMs", n(claimed_at.timestamp_millis())),
                (":nowMs", n(now.timestamp_millis())),
            ])))
            .send()
            .await;
        written("UpdateItem", table, result)
    }

    pub(super) async fn finish_item(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        outcome: Outcome,
        now: DateTime<Utc>,
        abandoned_before: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let table = &self.tables.calls;
        let mut vals = vec![
            (":callId", s(call_id.as_str())),
            (":claimed", s(ReservationStatus::Claimed.as_str())),
            (":outcome", s(outcome.status().as_str())),
            (":updatedAt", s(rfc3339_millis(now))),
            (":expireAt", n(terminal_expiry(now))),
            (":token", s(write_token())),
        ];
        let mut attribute_names = vec![CALL_ID, STATUS, UPDATED_AT, EXPIRE_AT, DUE_SHARD];
        attribute_names.push(FINISH_TOKEN);
        let first = match outcome {
            Outcome::Sent | Outcome::Failed => "#callId = :callId AND #status = :claimed",
            Outcome::Missed => {
                vals.push((":scheduled", s(ReservationStatus::Scheduled.as_str())));
                vals.push((":abandonedBeforeMs", n(abandoned_before.timestamp_millis())));
                attribute_names.extend([CLAIMED_AT_MS, PUSH_STARTED_AT_MS]);
                CLAIMABLE
            }
        };
        let condition = format!(
            "({first}) OR (#callId = :callId AND #status = :outcome AND #finishToken = :token)"
        );
        let result = self
            .client
            .update_item()
            .table_name(table)
            .key(DEVICE_ID, s(id.as_str()))
            .update_expression(
                "SET #status = :outcome, #updatedAt = :updatedAt, #expireAt = :expireAt, \
                 #finishToken = :token REMOVE #dueShard",
            )
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names(&attribute_names)))
            .set_expression_attribute_values(Some(values(vals)))
            .send()
            .await;
        written("UpdateItem", table, result)
    }
}
