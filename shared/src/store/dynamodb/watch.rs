//! The DynamoDB adapter's watch of a minute: a run's promise, on the minute's count item
//! (`due#<minute>`, attribute `watchedUntil`), to select that minute again until then, and a
//! create's claim of the duty to wake such a run.

use chrono::{DateTime, Utc};

use super::reservations::DUE_COUNT_PREFIX;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;

use super::{DEVICE_ID, DynamoStore, EXPIRE_AT, condition_failed, n, names, s, sdk_error};
use crate::store::StoreError;

const WATCHED_UNTIL: &str = "watchedUntil";
/// S: the call whose create claimed the minute's last wake.
const WAKE_CLAIMANT: &str = "wakeClaimant";
/// How long a count item made by a watch alone (no reservation for its minute) lives.
const WATCH_TTL: chrono::Duration = chrono::Duration::days(1);

impl DynamoStore {
    /// Raises the minute's `watchedUntil` to `until` (never lowers it: of overlapping runs the
    /// latest promise stands); a raised watch is no longer a create's claim (`wakeClaimant`
    /// goes). One write unit, on the dispatcher's client.
    pub(super) async fn watch_item(
        &self,
        minute: &str,
        until: DateTime<Utc>,
    ) -> Result<(), StoreError> {
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
    pub(super) async fn claim_wake_item(
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
}
