//! The DynamoDB adapter's dispatch requests: the due-minute query, the claim, the mark that a
//! push started, and the outcome, each one conditional request (tokens: `retried`).

use chrono::{DateTime, Utc};

use super::retried::{CLAIM_TOKEN, FINISH_TOKEN, write_token};
use super::{
    CALL_ID, CLAIMED_AT_MS, DEVICE_ID, DUE_MINUTE, DynamoStore, EXPIRE_AT, Item,
    PUSH_STARTED_AT_MS, STATUS, UPDATED_AT, condition_failed, n, names, reservation_from_item, s,
    sdk_error, values,
};
use crate::domain::device::DeviceId;
use crate::domain::reservation::{
    CallId, Reservation, ReservationStatus, rfc3339_millis, terminal_expiry,
};
use crate::store::{DUE_INDEX, Outcome, StoreError};

/// The condition under which a reservation may be claimed (or marked missed): still
/// `scheduled`, or `claimed` before `:abandonedBeforeMs` (the claiming run died) and its push
/// never started (no `pushStartedAtMs`: a started push may have left).
const CLAIMABLE: &str = "#callId = :callId AND (#status = :scheduled OR \
     (#status = :claimed AND #claimedAtMs < :abandonedBeforeMs \
      AND attribute_not_exists(#pushStartedAtMs)))";

impl DynamoStore {
    pub(super) async fn due_items(&self, minute: &str) -> Result<Vec<Reservation>, StoreError> {
        let table = &self.tables.calls;
        let mut due = Vec::new();
        let mut start_key: Option<Item> = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(table)
                .index_name(DUE_INDEX)
                .key_condition_expression("#dueMinute = :minute")
                .filter_expression("#status IN (:scheduled, :claimed)")
                .set_expression_attribute_names(Some(names(&[DUE_MINUTE, STATUS])))
                .set_expression_attribute_values(Some(values(vec![
                    (":minute", s(minute)),
                    (":scheduled", s(ReservationStatus::Scheduled.as_str())),
                    (":claimed", s(ReservationStatus::Claimed.as_str())),
                ])))
                .scan_index_forward(true)
                .set_exclusive_start_key(start_key.take())
                .send()
                .await
                .map_err(|e| sdk_error("Query", table, e))?;
            for item in out.items() {
                due.push(reservation_from_item(table, item)?);
            }
            match out.last_evaluated_key() {
                Some(key) if !key.is_empty() => start_key = Some(key.clone()),
                _ => break,
            }
        }
        Ok(due)
    }

    pub(super) async fn claim_item(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        now: DateTime<Utc>,
        abandoned_before: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
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
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if condition_failed(&e) => Ok(false),
            Err(e) => Err(sdk_error("UpdateItem", table, e)),
        }
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
        match result {
            Ok(_) => Ok(true),
            Err(e) if condition_failed(&e) => Ok(false),
            Err(e) => Err(sdk_error("UpdateItem", table, e)),
        }
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
        let mut attribute_names = vec![CALL_ID, STATUS, UPDATED_AT, EXPIRE_AT, DUE_MINUTE];
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
                 #finishToken = :token REMOVE #dueMinute",
            )
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names(&attribute_names)))
            .set_expression_attribute_values(Some(values(vals)))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if condition_failed(&e) => Ok(false),
            Err(e) => Err(sdk_error("UpdateItem", table, e)),
        }
    }
}
