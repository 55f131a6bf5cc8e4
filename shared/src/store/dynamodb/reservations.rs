//! The DynamoDB adapter's reservation requests for the API: create (with its minute's count),
//! read and cancel. A create whose replies are lost is resolved, not written twice: the count's
//! `ADD` carries the reservation's `callId` as its token, and a put refused on, or without an
//! answer, is read back: a record with its own `callId` is this create's.

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};
use chrono::{DateTime, Utc};

use super::items::{Reader, reservation_from_item, reservation_item};
use super::{
    CALL_ID, DEVICE_ID, DynamoStore, EXPIRE_AT, SCHEDULED_AT_MS, STATUS, bad_item,
    condition_failed, n, names, retried, s, sdk_error, values,
};
use crate::domain::device::DeviceId;
use crate::domain::due::{shard_of, shards_for};
use crate::domain::reservation::{CallId, Reservation, ReservationStatus};
use crate::store::{CancelError, CreateError, Created, StoreError};

/// The key prefix (in `deviceId`) of a minute's reservation count, `due#2026-01-01T22:00Z`.
pub(super) const DUE_COUNT_PREFIX: &str = "due#";
pub(super) const DUE_COUNT: &str = "count";
/// The `callId` of the count's last `ADD`: a retry of that very `ADD` adds nothing.
const LAST_CALL: &str = "lastCallId";

impl DynamoStore {
    pub(super) async fn create_item(
        &self,
        reservation: &Reservation,
        now: DateTime<Utc>,
        stale_before: DateTime<Utc>,
    ) -> Result<Created, CreateError> {
        let table = &self.tables.calls;
        // Counted first: a count a failed create leaves behind only means one shard too many,
        // while a reservation in a shard the count does not cover would never ring.
        let minute = reservation.scheduled_at.due_minute();
        let count = self
            .count_due(
                &minute,
                &reservation.call_id,
                reservation.expire_at.unwrap_or_default(),
            )
            .await?;
        let shard = shard_of(&reservation.call_id, shards_for(count));
        let result = self
            .client
            .put_item()
            .table_name(table)
            .set_item(Some(reservation_item(reservation, shard)))
            // This very reservation (a retry of this write) is never written over: the
            // condition fails and the read below finds it.
            .condition_expression(
                "attribute_not_exists(#deviceId) OR #expireAt <= :nowSecs \
                 OR (#callId <> :callId \
                     AND (#status IN (:sent, :failed, :missed) OR #scheduledAtMs < :staleBeforeMs))",
            )
            .set_expression_attribute_names(Some(names(&[
                DEVICE_ID,
                STATUS,
                EXPIRE_AT,
                SCHEDULED_AT_MS,
                CALL_ID,
            ])))
            .set_expression_attribute_values(Some(values(vec![
                (":callId", s(reservation.call_id.as_str())),
                (":sent", s(ReservationStatus::Sent.as_str())),
                (":failed", s(ReservationStatus::Failed.as_str())),
                (":missed", s(ReservationStatus::Missed.as_str())),
                (":nowSecs", n(now.timestamp())),
                (":staleBeforeMs", n(stale_before.timestamp_millis())),
            ])))
            .send()
            .await;
        let err = match result {
            Ok(_) => return Ok(Created::New),
            Err(e) if condition_failed(&e) => {
                return match self.reservation_item(&reservation.device_id, now).await {
                    // This very reservation (same `callId`): an earlier attempt of this
                    // create (its reply lost), or a copy of it, wrote it.
                    Ok(Some(stored)) if stored.call_id == reservation.call_id => {
                        Ok(Created::Already(Box::new(stored)))
                    }
                    Ok(_) => Err(CreateError::Exists),
                    Err(e) => Err(CreateError::Store(e)),
                };
            }
            Err(e) => sdk_error("PutItem", table, e),
        };
        // No answer (every attempt lost or late): the record says whether the put happened.
        match self.reservation_item(&reservation.device_id, now).await {
            // Written by one of this call's attempts: new, as far as the caller is concerned.
            Ok(Some(stored)) if stored.call_id == reservation.call_id => Ok(Created::New),
            _ => Err(CreateError::Store(err)),
        }
    }

    /// Counts one more reservation (`call_id`) made for `minute` (its TTL `expire_at`); the new
    /// count. An `ADD` made again for the same call (its reply lost) adds nothing and answers
    /// the count its first attempt left, unless another call's `ADD` came between (then it
    /// counts twice: one shard too many, never too few).
    async fn count_due(
        &self,
        minute: &str,
        call_id: &CallId,
        expire_at: i64,
    ) -> Result<u32, StoreError> {
        let table = &self.tables.calls;
        let result = self
            .client
            .update_item()
            .table_name(table)
            .key(DEVICE_ID, s(format!("{DUE_COUNT_PREFIX}{minute}")))
            .update_expression("ADD #count :one SET #expireAt = :expireAt, #lastCallId = :callId")
            .condition_expression("attribute_not_exists(#lastCallId) OR #lastCallId <> :callId")
            .set_expression_attribute_names(Some(names(&[DUE_COUNT, EXPIRE_AT, LAST_CALL])))
            .set_expression_attribute_values(Some(values(vec![
                (":one", n(1)),
                (":expireAt", n(expire_at)),
                (":callId", s(call_id.as_str())),
            ])))
            .return_values(ReturnValue::UpdatedNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let item = match result {
            Ok(out) => out.attributes().cloned().unwrap_or_default(),
            Err(e) => match e.as_service_error() {
                // This call's own earlier `ADD` (its reply lost): its count stands.
                Some(UpdateItemError::ConditionalCheckFailedException(f)) => {
                    f.item().cloned().unwrap_or_default()
                }
                _ => return Err(sdk_error("UpdateItem", table, e)),
            },
        };
        let count = Reader { table, item: &item }
            .opt_i64(DUE_COUNT)?
            .ok_or_else(|| bad_item(table, DUE_COUNT))?;
        u32::try_from(count).map_err(|_| bad_item(table, DUE_COUNT))
    }

    /// The device's reservation in any state, read consistently; `None` if none or expired.
    pub(super) async fn reservation_item(
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

    pub(super) async fn cancel_item(
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
}
