//! The DynamoDB adapter's outcome writes: how a call's dispatch ends (`finish_request`, the
//! UpdateItem of `Store::finish_reservation`) and its device's confirmation
//! (`confirm_update`, of `ReservationStore::confirm_call`).

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use chrono::{DateTime, Utc};

use super::{
    CALL_ID, CLAIM_TOKEN, CLAIMED_AT_MS, CONFIRMS, DEVICE_ID, DUE_SHARD, DynamoStore, EXPIRE_AT,
    FINISH_TOKEN, PUSH_STARTED_AT_MS, PUSHES, RANG_AT_MS, SCHEDULED_AT_MS, STATUS, UPDATED_AT, n,
    names, reservation_from_item, s, sdk_error, values,
};
use crate::domain::device::DeviceId;
use crate::domain::reservation::{
    CallId, ReservationStatus, RunToken, rfc3339_millis, terminal_expiry,
};
use crate::store::dynamodb::dispatch::{CLAIMABLE, CLAIMED_BY_RUN, PUSHED_THEN_ABANDONED};
use crate::store::{ConfirmAnswer, Outcome, StoreError};

/// One outcome's UpdateItem: its update and condition expressions, names and values.
pub(super) struct FinishRequest {
    pub(super) update: &'static str,
    pub(super) condition: String,
    pub(super) names: Vec<&'static str>,
    pub(super) values: Vec<(&'static str, AttributeValue)>,
}

/// The write that records `outcome` by `run` (`Store::finish_reservation`'s rules). Each
/// condition's last branch accepts this run's own write of the same outcome, made by an
/// attempt whose reply was lost.
pub(super) fn finish_request(
    outcome: Outcome,
    call_id: &CallId,
    run: &RunToken,
    now: DateTime<Utc>,
    abandoned_before: DateTime<Utc>,
) -> FinishRequest {
    let mut vals = vec![
        (":callId", s(call_id.as_str())),
        (":claimed", s(ReservationStatus::Claimed.as_str())),
        (":scheduled", s(ReservationStatus::Scheduled.as_str())),
        (":outcome", s(outcome.status().as_str())),
        (":updatedAt", s(rfc3339_millis(now))),
        (":run", s(run.as_str())),
        (":abandonedBeforeMs", n(abandoned_before.timestamp_millis())),
        (":true", AttributeValue::Bool(true)),
    ];
    let mut attribute_names = vec![
        CALL_ID,
        STATUS,
        UPDATED_AT,
        FINISH_TOKEN,
        CLAIM_TOKEN,
        CLAIMED_AT_MS,
        PUSH_STARTED_AT_MS,
        CONFIRMS,
        PUSHES,
    ];
    let own = "#callId = :callId AND #status = :outcome AND #finishToken = :run";
    if let Outcome::Pushed { next_at, pushes } = outcome {
        vals.push((":pushes", n(pushes)));
        vals.push((":nextAtMs", n(next_at.timestamp_millis())));
        let before = if pushes <= 1 {
            "attribute_not_exists(#pushes)"
        } else {
            vals.push((":before", n(pushes - 1)));
            "#pushes = :before"
        };
        attribute_names.push(SCHEDULED_AT_MS);
        return FinishRequest {
            // Due again under the same bucket-index entry: its sort key moves to `next_at`.
            update: "SET #status = :outcome, #pushes = :pushes, #scheduledAtMs = :nextAtMs, \
                     #updatedAt = :updatedAt, #finishToken = :run \
                     REMOVE #claimedAtMs, #claimToken, #pushStartedAtMs, #confirms",
            condition: format!(
                "((({CLAIMED_BY_RUN}) OR ({PUSHED_THEN_ABANDONED})) AND {before}) \
                 OR ({own} AND #pushes = :pushes AND #scheduledAtMs = :nextAtMs)"
            ),
            names: attribute_names,
            values: vals,
        }
        .used();
    }
    vals.push((":expireAt", n(terminal_expiry(now))));
    attribute_names.extend([EXPIRE_AT, DUE_SHARD]);
    let first = match outcome {
        Outcome::Sent | Outcome::Failed => "#callId = :callId AND #status = :claimed".to_owned(),
        // A call whose push left is never missed (it ends unconfirmed).
        Outcome::Missed => format!("({CLAIMABLE}) AND attribute_not_exists(#pushes)"),
        Outcome::Unconfirmed => format!(
            "({CLAIMED_BY_RUN}) OR ({PUSHED_THEN_ABANDONED}) \
             OR (#callId = :callId AND #status = :scheduled AND attribute_exists(#pushes))"
        ),
        Outcome::Pushed { .. } => unreachable!("handled above"),
    };
    let update = if outcome == Outcome::Sent {
        // The push left: counted (at least one; kept if a confirming device's pushes came first).
        vals.push((":one", n(1)));
        "SET #status = :outcome, #updatedAt = :updatedAt, #expireAt = :expireAt, \
         #finishToken = :run, #pushes = if_not_exists(#pushes, :one) REMOVE #dueShard"
    } else {
        "SET #status = :outcome, #updatedAt = :updatedAt, #expireAt = :expireAt, \
         #finishToken = :run REMOVE #dueShard"
    };
    FinishRequest {
        update,
        condition: format!("({first}) OR ({own})"),
        names: attribute_names,
        values: vals,
    }
    .used()
}

impl FinishRequest {
    /// Only the names and values its expressions use (DynamoDB refuses unused ones).
    fn used(mut self) -> FinishRequest {
        let text = format!("{} {}", self.update, self.condition);
        let mentions = |token: &str| {
            text.match_indices(token).any(|(at, _)| {
                !text[at + token.len()..]
                    .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            })
        };
        self.names.retain(|name| mentions(&format!("#{name}")));
        self.values.retain(|(key, _)| mentions(key));
        self
    }
}

impl DynamoStore {
    pub(super) async fn confirm_update(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        now: DateTime<Utc>,
        first_push: bool,
    ) -> Result<ConfirmAnswer, StoreError> {
        let table = &self.tables.calls;
        let (update, condition) = if first_push {
            (
                "SET #status = :rang, #rangAtMs = :nowMs, #updatedAt = :updatedAt, \
                 #expireAt = :expireAt, #pushes = :one REMOVE #dueShard",
                "#callId = :callId AND #expireAt > :nowSecs AND #status = :claimed \
                 AND attribute_not_exists(#pushes) AND attribute_exists(#pushStartedAtMs)",
            )
        } else {
            (
                "SET #status = :rang, #rangAtMs = :nowMs, #updatedAt = :updatedAt, \
                 #expireAt = :expireAt REMOVE #dueShard",
                "#callId = :callId AND #expireAt > :nowSecs AND (#status IN (:sent, :unconfirmed) \
                 OR (#status = :scheduled AND attribute_exists(#pushes)) \
                 OR (#status = :claimed AND attribute_exists(#pushes) \
                     AND attribute_not_exists(#pushStartedAtMs)))",
            )
        };
        let mut vals = vec![
            (":callId", s(call_id.as_str())),
            (":rang", s(ReservationStatus::Rang.as_str())),
            (":claimed", s(ReservationStatus::Claimed.as_str())),
            (":nowMs", n(now.timestamp_millis())),
            (":nowSecs", n(now.timestamp())),
            (":updatedAt", s(rfc3339_millis(now))),
            (":expireAt", n(terminal_expiry(now))),
        ];
        if first_push {
            vals.push((":one", n(1)));
        } else {
            vals.extend([
                (":sent", s(ReservationStatus::Sent.as_str())),
                (":unconfirmed", s(ReservationStatus::Unconfirmed.as_str())),
                (":scheduled", s(ReservationStatus::Scheduled.as_str())),
            ]);
        }
        let result = self
            .client
            .update_item()
            .table_name(table)
            .key(DEVICE_ID, s(id.as_str()))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names(&[
                CALL_ID,
                STATUS,
                RANG_AT_MS,
                UPDATED_AT,
                EXPIRE_AT,
                DUE_SHARD,
                PUSHES,
                PUSH_STARTED_AT_MS,
            ])))
            .set_expression_attribute_values(Some(values(vals)))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let err = match result {
            Ok(out) => {
                let item = out.attributes().cloned().unwrap_or_default();
                return Ok(ConfirmAnswer::Rang(Box::new(reservation_from_item(
                    table, &item,
                )?)));
            }
            Err(e) => e,
        };
        let old = match err.as_service_error() {
            Some(UpdateItemError::ConditionalCheckFailedException(failed)) => failed.item(),
            _ => return Err(sdk_error("UpdateItem", table, err)),
        };
        let Some(old) = old else {
            return Ok(ConfirmAnswer::NotFound);
        };
        let current = reservation_from_item(table, old)?;
        Ok(
            match (
                current.status,
                current.call_id == *call_id && !current.is_expired(now),
            ) {
                (_, false) => ConfirmAnswer::NotFound,
                (ReservationStatus::Rang, true) => ConfirmAnswer::Rang(Box::new(current)),
                (ReservationStatus::Claimed, true)
                    if current.pushes > 0 && current.push_started_at.is_some() =>
                {
                    ConfirmAnswer::PushInFlight
                }
                _ => ConfirmAnswer::NotFound,
            },
        )
    }
}
