//! The DynamoDB adapter's dispatch requests: a minute's reservation count, the shard query, the
//! claim, the mark that a push started, and the outcome (tokens against lost replies: `retried`).

use chrono::{DateTime, Utc};

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;

use super::{
    CALL_ID, CALLER_NAME, CLAIM_TOKEN, CLAIMED_AT_MS, DEVICE_ID, DUE_SHARD, DynamoStore, EXPIRE_AT,
    FINISH_TOKEN, Item, PUSH_STARTED_AT_MS, Reader, SCHEDULED_AT, STATUS, UPDATED_AT, bad_item, n,
    names, reservation_from_item, s, sdk_error, values, written,
};
use crate::domain::device::DeviceId;
use crate::domain::due::{DueCall, shard_key};
use crate::domain::reservation::{
    CallId, ReservationStatus, RunToken, ScheduledAt, rfc3339_millis, terminal_expiry,
};
use crate::store::{ClaimAnswer, DUE_INDEX, Outcome, StoreError};

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

/// The reservation is claimed by the run whose token is `:run` (its own claim, whatever became
/// of the reply that said so).
const CLAIMED_BY_RUN: &str = "#callId = :callId AND #status = :claimed AND #claimToken = :run";

impl DynamoStore {
    /// `due#<minute>` in the calls table: the minute's count of reservations made for it.
    pub(super) async fn due_count_item(&self, minute: &str) -> Result<u32, StoreError> {
        self.count_item(minute, true).await
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
        run: &RunToken,
        now: DateTime<Utc>,
        abandoned_before: DateTime<Utc>,
    ) -> Result<ClaimAnswer, StoreError> {
        let table = &self.tables.calls;
        let result = self
            .dispatch
            .update_item()
            .table_name(table)
            .key(DEVICE_ID, s(id.as_str()))
            .update_expression(
                "SET #status = :claimed, #claimedAtMs = :nowMs, #updatedAt = :updatedAt, \
                 #claimToken = :run",
            )
            .condition_expression(format!("({CLAIMABLE}) OR ({CLAIMED_BY_RUN})"))
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
                (":run", s(run.as_str())),
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
        Ok(ClaimAnswer::Refused(
            current.filter(|r| !r.is_expired(now)).map(Box::new),
        ))
    }

    pub(super) async fn mark_item(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let table = &self.tables.calls;
        // Made again after a lost reply, it meets its own claim and keeps the first time.
        let result = self
            .dispatch
            .update_item()
            .table_name(table)
            .key(DEVICE_ID, s(id.as_str()))
            .update_expression("SET #pushStartedAtMs = if_not_exists(#pushStartedAtMs, :nowMs)")
            .condition_expression(CLAIMED_BY_RUN)
            .set_expression_attribute_names(Some(names(&[
                CALL_ID,
                STATUS,
                CLAIM_TOKEN,
                PUSH_STARTED_AT_MS,
            ])))
            .set_expression_attribute_values(Some(values(vec![
                (":callId", s(call_id.as_str())),
                (":claimed", s(ReservationStatus::Claimed.as_str())),
                (":run", s(run.as_str())),
                (":nowMs", n(now.timestamp_millis())),
            ])))
            .send()
            .await;
        written("UpdateItem", table, result)
    }

    pub(super) async fn release_item(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let table = &self.tables.calls;
        // Made again after a lost reply, it finds the call `scheduled`: released.
        let result = self
            .dispatch
            .update_item()
            .table_name(table)
            .key(DEVICE_ID, s(id.as_str()))
            .update_expression(
                "SET #status = :scheduled, #updatedAt = :updatedAt \
                 REMOVE #claimedAtMs, #claimToken, #pushStartedAtMs",
            )
            .condition_expression(format!(
                "({CLAIMED_BY_RUN}) OR (#callId = :callId AND #status = :scheduled)"
            ))
            .set_expression_attribute_names(Some(names(&[
                CALL_ID,
                STATUS,
                CLAIM_TOKEN,
                CLAIMED_AT_MS,
                PUSH_STARTED_AT_MS,
                UPDATED_AT,
            ])))
            .set_expression_attribute_values(Some(values(vec![
                (":callId", s(call_id.as_str())),
                (":claimed", s(ReservationStatus::Claimed.as_str())),
                (":scheduled", s(ReservationStatus::Scheduled.as_str())),
                (":run", s(run.as_str())),
                (":updatedAt", s(rfc3339_millis(now))),
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
        run: &RunToken,
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
            (":run", s(run.as_str())),
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
        // The second branch: this run's own outcome, written by an attempt whose reply was lost.
        let condition = format!(
            "({first}) OR (#callId = :callId AND #status = :outcome AND #finishToken = :run)"
        );
        let result = self
            .dispatch
            .update_item()
            .table_name(table)
            .key(DEVICE_ID, s(id.as_str()))
            .update_expression(
                "SET #status = :outcome, #updatedAt = :updatedAt, #expireAt = :expireAt, \
                 #finishToken = :run REMOVE #dueShard",
            )
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names(&attribute_names)))
            .set_expression_attribute_values(Some(values(vals)))
            .send()
            .await;
        written("UpdateItem", table, result)
    }
}
