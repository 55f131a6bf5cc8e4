//! The DynamoDB adapter's outcome writes: how a call's dispatch ends (`finish_request`, the
//! UpdateItem of `Store::finish_reservation`) and its device's confirmation
//! (`confirm_update`, of `ReservationStore::confirm_call`).

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use chrono::{DateTime, Utc};

use super::conditions::{CLAIMABLE, CLAIMED_BY_RUN, PUSHED_THEN_ABANDONED};
use super::{DynamoStore, n, reservation_from_item, s};
use super::{answered, call_values, update_item};
use crate::domain::device::DeviceId;
use crate::domain::reservation::{CallId, ReservationStatus, RunToken, terminal_expiry};
use crate::store::{ConfirmAnswer, Outcome, StoreError};

/// One outcome's UpdateItem: its update and condition expressions, and the values they use
/// beyond [`call_values`](super::requests::call_values).
pub(super) struct FinishRequest {
    pub(super) update: &'static str,
    pub(super) condition: String,
    pub(super) values: Vec<(&'static str, AttributeValue)>,
}

/// The write that records `outcome` by `run` (`Store::finish_reservation`'s rules). Each
/// condition's last branch accepts this run's own write of the same outcome, made by an
/// attempt whose reply was lost.
pub(super) fn finish_request(
    outcome: Outcome,
    run: &RunToken,
    now: DateTime<Utc>,
    abandoned_before: DateTime<Utc>,
) -> FinishRequest {
    let mut vals = vec![
        (":outcome", s(outcome.status().as_str())),
        (":run", s(run.as_str())),
        (":abandonedBeforeMs", n(abandoned_before.timestamp_millis())),
        (":true", AttributeValue::Bool(true)),
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
        return FinishRequest {
            // Due again under the same bucket-index entry: its sort key moves to `next_at`.
            update: "SET #status = :outcome, #pushes = :pushes, #scheduledAtMs = :nextAtMs, \
                     #updatedAt = :updatedAt, #finishToken = :run \
                     REMOVE #claimedAtMs, #claimToken, #pushStartedAtMs, #markBatchMs, #confirms",
            condition: format!(
                "((({CLAIMED_BY_RUN}) OR ({PUSHED_THEN_ABANDONED})) AND {before}) \
                 OR ({own} AND #pushes = :pushes AND #scheduledAtMs = :nextAtMs)"
            ),
            values: vals,
        };
    }
    vals.push((":expireAt", n(terminal_expiry(now))));
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
        values: vals,
    }
}

impl DynamoStore {
    /// The confirmation's one conditional update to `rang` (see
    /// `ReservationStore::confirm_call`): one condition for every state whose push left, so an
    /// outcome the run records meanwhile (the push counted, the call ended `unconfirmed`)
    /// cannot fall between two updates and make it 404. `pushes` becomes 1 where none is
    /// recorded yet (a first push confirmed before its run recorded it), else is kept.
    pub(super) async fn confirm_update(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        now: DateTime<Utc>,
    ) -> Result<ConfirmAnswer, StoreError> {
        let table = &self.tables.calls;
        let update = "SET #status = :rang, #rangAtMs = :nowMs, #updatedAt = :updatedAt, \
                      #expireAt = :expireAt, #pushes = if_not_exists(#pushes, :one) \
                      REMOVE #dueShard";
        let condition = "#callId = :callId AND #expireAt > :nowSecs AND (\
                         #status IN (:sent, :unconfirmed) \
                         OR (#status = :scheduled AND attribute_exists(#pushes)) \
                         OR (#status = :claimed AND attribute_exists(#pushes) \
                             AND attribute_not_exists(#pushStartedAtMs)) \
                         OR (#status = :claimed AND attribute_not_exists(#pushes) \
                             AND (attribute_exists(#pushStartedAtMs) \
                                  OR attribute_exists(#markBatchMs))))";
        let offered = vec![(":expireAt", n(terminal_expiry(now))), (":one", n(1))];
        let request = update_item(
            &self.client,
            table,
            id.as_str(),
            update,
            condition,
            call_values(call_id, now, offered),
        )
        .return_values(ReturnValue::AllNew);
        let old = match answered(table, request).await? {
            Ok(rang) => {
                let rang = reservation_from_item(table, &rang)?;
                return Ok(ConfirmAnswer::Rang(Box::new(rang)));
            }
            Err(old) => old,
        };
        let Some(old) = old else {
            return Ok(ConfirmAnswer::NotFound);
        };
        let current = reservation_from_item(table, &old)?;
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
