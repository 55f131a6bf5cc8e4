//! The DynamoDB adapter's dispatch requests: a minute's reservation count, the shard query, the
//! minute's watch (`watchedUntil` on the count item `due#<minute>`: a run's promise to select the
//! minute again until then, and a create's claim of the duty to wake such a run), the claim, the
//! mark that a push started, and the outcome (tokens against lost replies: `retried`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};

use super::outcome::finish_request;
use super::reservations::DUE_COUNT_PREFIX;
use super::{
    CALL_ID, CALLER_NAME, CLAIM_TOKEN, CLAIMED_AT_MS, CONFIRMS, DEVICE_ID, DUE_SHARD, DynamoStore,
    EXPIRE_AT, Item, PUSH_STARTED_AT_MS, PUSHES, Reader, SCHEDULED_AT, SCHEDULED_AT_MS, STATUS,
    UPDATED_AT, bad_item, condition_failed, n, names, reservation_from_item, s, sdk_error, values,
    written,
};
use crate::domain::device::DeviceId;
use crate::domain::due::{DueCall, shard_key};
use crate::domain::reservation::{
    CallId, ReservationStatus, RunToken, ScheduledAt, rfc3339_millis,
};
use crate::store::prelude::*;
use crate::store::{ClaimAnswer, DUE_INDEX, Outcome, PUSH_AGAIN_CLAIM_LEAD, StoreError};

fn due_call_from_item(table: &str, item: &Item) -> Result<DueCall, StoreError> {
    let r = Reader { table, item };
    let scheduled_at = chrono::DateTime::parse_from_rfc3339(r.s(SCHEDULED_AT)?)
        .map_err(|_| bad_item(table, SCHEDULED_AT))?;
    Ok(DueCall {
        call_id: CallId::from_stored(r.s(CALL_ID)?.to_owned()),
        device_id: DeviceId::from_stored(r.s(DEVICE_ID)?.to_owned()),
        scheduled_at: ScheduledAt::from_stored(scheduled_at),
        // The index's sort key: when the next push is due.
        due_at: super::items::due_at(&r, scheduled_at)?,
        caller_name: r.opt_s(CALLER_NAME)?.map(str::to_owned),
    })
}

/// The condition under which a reservation may be claimed (or marked missed): still
/// `scheduled`, or `claimed` before `:abandonedBeforeMs` (the claiming run died) and its push
/// never started (no `pushStartedAtMs`: a started push may have left).
pub(super) const CLAIMABLE: &str = "#callId = :callId AND (#status = :scheduled OR \
     (#status = :claimed AND #claimedAtMs < :abandonedBeforeMs \
      AND attribute_not_exists(#pushStartedAtMs)))";

/// A claim's extra condition: a call waiting for its push again (`pushes` set) is not claimed
/// before `:dueByMs` (its due time less `PUSH_AGAIN_CLAIM_LEAD`).
const NOT_EARLY: &str = "(attribute_not_exists(#pushes) OR #scheduledAtMs <= :dueByMs)";

/// A claim made before `:abandonedBeforeMs` whose push started, to a device that confirms its
/// calls: the push may have left; it counts, and the call goes again.
pub(super) const PUSHED_THEN_ABANDONED: &str = "#callId = :callId AND #status = :claimed \
     AND #claimedAtMs < :abandonedBeforeMs AND attribute_exists(#pushStartedAtMs) \
     AND #confirms = :true";

/// The reservation is claimed by the run whose token is `:run` (its own claim, whatever became
/// of the reply that said so).
pub(super) const CLAIMED_BY_RUN: &str =
    "#callId = :callId AND #status = :claimed AND #claimToken = :run";

const WATCHED_UNTIL: &str = "watchedUntil";
/// S: the call whose create claimed the minute's last wake.
const WAKE_CLAIMANT: &str = "wakeClaimant";
/// How long a count item made by a watch alone (no reservation for its minute) lives.
const WATCH_TTL: chrono::Duration = chrono::Duration::days(1);

#[async_trait]
impl DispatchStore for DynamoStore {
    /// `due#<minute>` in the calls table: the minute's count of reservations made for it,
    /// eventually consistent: the shard queries after it are too (an index has no other
    /// read), so a stale count misses nothing they would not; the next re-selection, at least
    /// 5 s before a call made 10 s ahead, reads it again.
    async fn due_count(&self, minute: &str) -> Result<u32, StoreError> {
        self.count_item(minute, false).await
    }

    async fn due_calls(&self, minute: &str, shard: u32) -> Result<Vec<DueCall>, StoreError> {
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

    /// Raises the minute's `watchedUntil` to `until` (never lowers it: of overlapping runs the
    /// latest promise stands); a raised watch is no longer a create's claim (`wakeClaimant`
    /// goes). One write unit, on the dispatcher's client.
    async fn watch_minute(&self, minute: &str, until: DateTime<Utc>) -> Result<(), StoreError> {
        let table = &self.tables.calls;
        let result = self
            .dispatch
            .update_item()
            .table_name(table)
            .key(DEVICE_ID, s(format!("{DUE_COUNT_PREFIX}{minute}")))
            .update_expression(
                "SET #watchedUntil = :until, #expireAt = if_not_exists(#expireAt, :expireAt) \
                 REMOVE #wakeClaimant",
            )
            .condition_expression("attribute_not_exists(#watchedUntil) OR #watchedUntil < :until")
            .set_expression_attribute_names(Some(names(&[WATCHED_UNTIL, EXPIRE_AT, WAKE_CLAIMANT])))
            .expression_attribute_values(":until", n(until.timestamp_millis()))
            .expression_attribute_values(":expireAt", n((until + WATCH_TTL).timestamp()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            // Another run promised as long or longer.
            Err(e) if condition_failed(&e) => Ok(()),
            Err(e) => Err(sdk_error("UpdateItem", table, e)),
        }
    }

    /// Raises the minute's `watchedUntil` to `until` unless it already reaches `due_at`
    /// (one conditional update: of creates at once, one wins), and names the `claimant` in
    /// `wakeClaimant`. A refusal is `false`, unless the claim that stands is the claimant's own
    /// (its earlier attempt was applied and its reply lost, or an SDK retry of this one).
    async fn claim_wake(
        &self,
        minute: &str,
        due_at: DateTime<Utc>,
        until: DateTime<Utc>,
        claimant: &str,
    ) -> Result<bool, StoreError> {
        let table = &self.tables.calls;
        let result = self
            .client
            .update_item()
            .table_name(table)
            .key(DEVICE_ID, s(format!("{DUE_COUNT_PREFIX}{minute}")))
            .update_expression(
                "SET #watchedUntil = :until, #wakeClaimant = :claimant, \
                 #expireAt = if_not_exists(#expireAt, :expireAt)",
            )
            .condition_expression("attribute_not_exists(#watchedUntil) OR #watchedUntil < :due")
            .set_expression_attribute_names(Some(names(&[WATCHED_UNTIL, WAKE_CLAIMANT, EXPIRE_AT])))
            .expression_attribute_values(":until", n(until.timestamp_millis()))
            .expression_attribute_values(":due", n(due_at.timestamp_millis()))
            .expression_attribute_values(":claimant", s(claimant))
            .expression_attribute_values(":expireAt", n((until + WATCH_TTL).timestamp()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let err = match result {
            Ok(_) => return Ok(true),
            Err(e) => e,
        };
        match err.as_service_error() {
            Some(UpdateItemError::ConditionalCheckFailedException(refused)) => Ok(refused
                .item()
                .and_then(|old| old.get(WAKE_CLAIMANT))
                .is_some_and(|by| by.as_s().is_ok_and(|by| by == claimant))),
            _ => Err(sdk_error("UpdateItem", table, err)),
        }
    }

    async fn claim_due(
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
            .condition_expression(format!(
                "(({CLAIMABLE}) AND {NOT_EARLY}) OR ({CLAIMED_BY_RUN})"
            ))
            .set_expression_attribute_names(Some(names(&[
                CALL_ID,
                STATUS,
                CLAIMED_AT_MS,
                UPDATED_AT,
                CLAIM_TOKEN,
                PUSH_STARTED_AT_MS,
                PUSHES,
                SCHEDULED_AT_MS,
            ])))
            .set_expression_attribute_values(Some(values(vec![
                (":callId", s(call_id.as_str())),
                (":scheduled", s(ReservationStatus::Scheduled.as_str())),
                (":claimed", s(ReservationStatus::Claimed.as_str())),
                (":abandonedBeforeMs", n(abandoned_before.timestamp_millis())),
                (":nowMs", n(now.timestamp_millis())),
                (":updatedAt", s(rfc3339_millis(now))),
                (":run", s(run.as_str())),
                (
                    ":dueByMs",
                    n((now + PUSH_AGAIN_CLAIM_LEAD).timestamp_millis()),
                ),
            ])))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let err = match result {
            Ok(out) => {
                let item = out.attributes().cloned().unwrap_or_default();
                let pushes = Reader { table, item: &item }.opt_i64(PUSHES)?.unwrap_or(0);
                let pushes = u32::try_from(pushes).map_err(|_| bad_item(table, PUSHES))?;
                return Ok(ClaimAnswer::Won { pushes });
            }
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

    async fn mark_push_started(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
        confirms: bool,
    ) -> Result<bool, StoreError> {
        let table = &self.tables.calls;
        // Made again after a lost reply, it meets its own claim and keeps the first time.
        let update = if confirms {
            "SET #pushStartedAtMs = if_not_exists(#pushStartedAtMs, :nowMs), #confirms = :true"
        } else {
            "SET #pushStartedAtMs = if_not_exists(#pushStartedAtMs, :nowMs)"
        };
        let mut vals = vec![
            (":callId", s(call_id.as_str())),
            (":claimed", s(ReservationStatus::Claimed.as_str())),
            (":run", s(run.as_str())),
            (":nowMs", n(now.timestamp_millis())),
        ];
        let mut attribute_names = vec![CALL_ID, STATUS, CLAIM_TOKEN, PUSH_STARTED_AT_MS];
        if confirms {
            vals.push((":true", AttributeValue::Bool(true)));
            attribute_names.push(CONFIRMS);
        }
        let result = self
            .dispatch
            .update_item()
            .table_name(table)
            .key(DEVICE_ID, s(id.as_str()))
            .update_expression(update)
            .condition_expression(CLAIMED_BY_RUN)
            .set_expression_attribute_names(Some(names(&attribute_names)))
            .set_expression_attribute_values(Some(values(vals)))
            .send()
            .await;
        written("UpdateItem", table, result)
    }

    async fn release_claim(
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

    async fn finish_reservation(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        outcome: Outcome,
        run: &RunToken,
        now: DateTime<Utc>,
        abandoned_before: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let table = &self.tables.calls;
        let finished = finish_request(outcome, call_id, run, now, abandoned_before);
        let result = self
            .dispatch
            .update_item()
            .table_name(table)
            .key(DEVICE_ID, s(id.as_str()))
            .update_expression(finished.update)
            .condition_expression(finished.condition)
            .set_expression_attribute_names(Some(names(&finished.names)))
            .set_expression_attribute_values(Some(values(finished.values)))
            .send()
            .await;
        written("UpdateItem", table, result)
    }
}
