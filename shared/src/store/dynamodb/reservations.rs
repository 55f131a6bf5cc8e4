//! The DynamoDB adapter's reservation requests for the API: create (a conditional put, then, for
//! one call id in `COUNT_STEP`, its minute's count), read, cancel (to `cancelled`, with the call's tombstone in one
//! transaction) and the cancelled-call look-up.
//! A create whose reply is lost is resolved, not written twice: the put's condition refuses its
//! own `callId`, and a put refused on, or without an answer, is read back.

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    Put, ReturnValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use chrono::{DateTime, Utc};

use super::items::{Reader, reservation_from_item, reservation_item};
use super::requests::mentioned;
use super::{
    CALL_ID, DEVICE_ID, DynamoStore, EXPIRE_AT, SCHEDULED_AT_MS, STATUS, condition_failed, n,
    names, s, sdk_error, values,
};
use super::{call_values, offer, read_item, update_item};
use crate::domain::device::DeviceId;
use crate::domain::due::{COUNT_STEP, raises_count, shard_of, shards_for};
use crate::domain::reservation::{CallId, Reservation, ReservationStatus, RunToken};
use crate::store::prelude::*;
use crate::store::{
    CancelError, CancelRequest, ConfirmAnswer, ConfirmRequest, CreateError, CreateRequest, Created,
    StoreError,
};

/// A create's condition on the device's record: none, expired, or another reservation that has
/// ended or gone stale. This very reservation (a retry of this write) is never written over.
const CREATE_CONDITION: &str = "attribute_not_exists(#deviceId) OR #expireAt <= :nowSecs \
     OR (#callId <> :callId \
         AND (#status IN (:sent, :failed, :missed, :cancelled, :rang, :unconfirmed) \
              OR #scheduledAtMs < :staleBeforeMs))";

fn create_names() -> std::collections::HashMap<String, String> {
    names(&[DEVICE_ID, STATUS, EXPIRE_AT, SCHEDULED_AT_MS, CALL_ID])
}

fn create_values(
    reservation: &Reservation,
    now: DateTime<Utc>,
    stale_before: DateTime<Utc>,
) -> std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue> {
    values(vec![
        (":callId", s(reservation.call_id.as_str())),
        (":sent", s(ReservationStatus::Sent.as_str())),
        (":failed", s(ReservationStatus::Failed.as_str())),
        (":missed", s(ReservationStatus::Missed.as_str())),
        (":cancelled", s(ReservationStatus::Cancelled.as_str())),
        (":rang", s(ReservationStatus::Rang.as_str())),
        (":unconfirmed", s(ReservationStatus::Unconfirmed.as_str())),
        (":nowSecs", n(now.timestamp())),
        (":staleBeforeMs", n(stale_before.timestamp_millis())),
    ])
}

/// A transaction's client token: from the operating system's random generator, one per send (the
/// SDK's retries of it carry the same). DynamoDB keeps a token for 10 minutes account-wide and
/// refuses it with other parameters (`IdempotentParameterMismatchException`); the SDK's own
/// default tokens were seen to repeat across processes started together (the fixtures test).
fn transaction_token() -> String {
    RunToken::generate().as_str().to_owned()
}

/// The key prefix (in `deviceId`) of a minute's reservation count, `due#2026-01-01T22:00Z`.
pub(super) const DUE_COUNT_PREFIX: &str = "due#";
pub(super) const DUE_COUNT: &str = "count";
/// The key prefix of a cancelled call's tombstone, `cancelled#<callId>` (`expireAt` only).
const CANCELLED_PREFIX: &str = "cancelled#";

#[async_trait]
impl ReservationStore for DynamoStore {
    /// The reservation (a conditional put), then, if its call id is one that counts
    /// ([`raises_count`]: one in [`COUNT_STEP`]), its minute's count (`ADD COUNT_STEP`), so a
    /// refused create leaves the count as it was, and a create costs about `1 / COUNT_STEP`
    /// write for its count, not one. A create stopped anywhere (killed, timed out) leaves no
    /// reservation that no run selects:
    /// - the shard comes from the count as read before the put, never more: the count only
    ///   grows, so every reader's count covers it whether or not this create's `ADD` follows;
    /// - with no count yet (0), the shard is 0, which every reader queries count or not.
    async fn create(&self, create: CreateRequest<'_>) -> Result<Created, CreateError> {
        let CreateRequest {
            reservation,
            now,
            stale_before,
        } = create;
        let table = &self.tables.calls;
        let minute = reservation.scheduled_at.due_minute();
        let count = self.count_item(&minute, false).await?;
        let shard = shard_of(&reservation.call_id, shards_for(count));
        let result = self
            .client
            .put_item()
            .table_name(table)
            .set_item(Some(reservation_item(reservation, shard)))
            // This very reservation (a retry of this write) is never written over: the
            // condition fails and the read below finds it.
            .condition_expression(CREATE_CONDITION)
            .set_expression_attribute_names(Some(create_names()))
            .set_expression_attribute_values(Some(create_values(reservation, now, stale_before)))
            .send()
            .await;
        let created = match result {
            Ok(_) => Created::New { minute_count: None },
            // Refused on the device's record: nothing written, nothing counted; unless it is
            // this very reservation (an earlier attempt), whose count is made sure of below.
            Err(e) if condition_failed(&e) => self.refused_create(reservation, now).await?,
            Err(e) => {
                // No answer (every attempt lost or late): the record says whether it happened.
                let err = sdk_error("PutItem", table, e);
                match self.reservation_record(&reservation.device_id, now).await {
                    Ok(Some(stored)) if stored.call_id == reservation.call_id => {
                        Created::New { minute_count: None }
                    }
                    Ok(_) => return Err(CreateError::Store(err)),
                    // Unknown: it may be stored, so it is counted (once too many if it is not).
                    Err(_) => {
                        let _ = self.count_due(&minute, reservation).await;
                        return Err(CreateError::Store(err));
                    }
                }
            }
        };
        // The reservation is in a shard every reader covers: a count not raised (an outage now)
        // only leaves the minute's shards fuller than `CALLS_PER_SHARD`, so the call is made.
        let counted = match self.count_due(&minute, reservation).await {
            Ok(counted) => counted,
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    call_id = reservation.call_id.as_str(),
                    "reservation made, its minute's count not raised"
                );
                None
            }
        };
        Ok(match created {
            Created::New { .. } => Created::New {
                minute_count: counted,
            },
            already => already,
        })
    }

    /// Whether `call_id` has a live tombstone.
    async fn was_cancelled(
        &self,
        call_id: &CallId,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let table = &self.tables.calls;
        let key = format!("{CANCELLED_PREFIX}{}", call_id.as_str());
        let Some(item) = read_item(&self.client, table, key, true, &[]).await? else {
            return Ok(false);
        };
        let expire_at = Reader { table, item: &item }.opt_i64(EXPIRE_AT)?;
        Ok(expire_at.is_none_or(|t| t > now.timestamp()))
    }

    /// One consistent `GetItem` of the device's record.
    async fn reservation_record(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<Option<Reservation>, StoreError> {
        let table = &self.tables.calls;
        let Some(item) = read_item(&self.client, table, id.as_str(), true, &[]).await? else {
            return Ok(None);
        };
        let reservation = reservation_from_item(table, &item)?;
        Ok((!reservation.is_expired(now)).then_some(reservation))
    }

    /// `scheduled` → `cancelled` (out of the bucket index, its TTL kept), on the reservation
    /// the device holds now or `call_id`, and the call's tombstone, so that a keyed retry finds
    /// it even after a newer reservation replaced this record: both in one transaction (the
    /// record's conditional update and the tombstone's put), so neither is ever without the
    /// other. Made again after a lost reply, it meets its own `cancelled` record (or, once a
    /// newer reservation replaced it, its tombstone) and answers `Ok`.
    async fn cancel(&self, cancel: CancelRequest<'_>) -> Result<(), CancelError> {
        let CancelRequest {
            id,
            call_id,
            now,
            missed_before,
        } = cancel;
        // The record as it is: the call to cancel (the one there at the first attempt, without
        // `call_id`: no attempt made again cancels another) and its TTL, the tombstone's.
        let record = match self.reservation_record(id, now).await? {
            Some(r) if call_id.is_none_or(|c| c == &r.call_id) => r,
            _ => return self.cancelled_before(call_id, now).await,
        };
        if !CancelError::check(&record, call_id.is_some(), missed_before)? {
            return Ok(());
        }
        let Some(existing) = self.cancel_and_entomb(&record, now).await? else {
            return Ok(());
        };
        // Refused: the record changed since it was read.
        match existing {
            Some(r) if !r.is_expired(now) && r.call_id == record.call_id => match r.status {
                // This cancel's own attempt made again by the SDK (its reply lost).
                ReservationStatus::Cancelled => Ok(()),
                _ => Err(CancelError::TooLate(r.status_seen(missed_before))),
            },
            _ => self.cancelled_before(call_id, now).await,
        }
    }

    /// One conditional update to `rang` (the first `rangAtMs` kept), whose condition covers
    /// every state whose push left; a refusal is told apart by the record it returns.
    async fn confirm(&self, confirm: ConfirmRequest<'_>) -> Result<ConfirmAnswer, StoreError> {
        let ConfirmRequest { id, call_id, now } = confirm;
        self.confirm_update(id, call_id, now).await
    }
}

impl DynamoStore {
    /// A cancel that names a call the device no longer holds: `Ok` if that call was cancelled
    /// (its tombstone lives: a DELETE made again after a newer reservation replaced it), else
    /// [`CancelError::NotFound`].
    async fn cancelled_before(
        &self,
        call_id: Option<&CallId>,
        now: DateTime<Utc>,
    ) -> Result<(), CancelError> {
        match call_id {
            Some(call_id) if self.was_cancelled(call_id, now).await? => Ok(()),
            _ => Err(CancelError::NotFound),
        }
    }

    /// Counts `reservation` into its minute if its call id is one that counts: `ADD
    /// COUNT_STEP`, its `callId` as the token (made again after a lost reply, or by a retry of
    /// the same create, it adds nothing unless another counting create's `ADD` came between:
    /// then once too many, never too few); no request for the others. The count after this
    /// `ADD` (`UPDATED_NEW`); `None` when not counted or refused.
    async fn count_due(
        &self,
        minute: &str,
        reservation: &Reservation,
    ) -> Result<Option<u32>, StoreError> {
        if !raises_count(&reservation.call_id) {
            return Ok(None);
        }
        let table = &self.tables.calls;
        let result = update_item(
            &self.client,
            table,
            format!("{DUE_COUNT_PREFIX}{minute}"),
            "ADD #count :step SET #expireAt = :expireAt, #lastCallId = :callId",
            "attribute_not_exists(#lastCallId) OR #lastCallId <> :callId",
            offer(vec![
                (":step", n(COUNT_STEP)),
                (":expireAt", n(reservation.expire_at.unwrap_or_default())),
                (":callId", s(reservation.call_id.as_str())),
            ]),
        )
        .return_values(ReturnValue::UpdatedNew)
        .send()
        .await;
        // Refused: this create's own earlier `ADD` (its reply lost) counted it.
        let output = match result {
            Ok(output) => output,
            Err(e) if condition_failed(&e) => return Ok(None),
            Err(e) => return Err(sdk_error("UpdateItem", table, e)),
        };
        let Some(item) = output.attributes else {
            return Ok(None);
        };
        let count = Reader { table, item: &item }.opt_i64(DUE_COUNT)?;
        Ok(count.map(|c| u32::try_from(c.max(0)).unwrap_or(u32::MAX)))
    }

    /// A create refused on the device's record: this very reservation already made (an earlier
    /// attempt, its reply lost), or made and cancelled, or another one holding the slot.
    async fn refused_create(
        &self,
        reservation: &Reservation,
        now: DateTime<Utc>,
    ) -> Result<Created, CreateError> {
        match self.reservation_record(&reservation.device_id, now).await {
            Ok(Some(stored)) if stored.call_id == reservation.call_id => {
                if stored.status == ReservationStatus::Cancelled {
                    Err(CreateError::Cancelled)
                } else {
                    Ok(Created::Already(Box::new(stored)))
                }
            }
            Ok(_) => Err(CreateError::Exists),
            Err(e) => Err(CreateError::Store(e)),
        }
    }

    /// A minute's count (`due#<minute>`), 0 if none; `consistent` for the dispatcher's readers.
    pub(super) async fn count_item(
        &self,
        minute: &str,
        consistent: bool,
    ) -> Result<u32, StoreError> {
        let table = &self.tables.calls;
        let key = format!("{DUE_COUNT_PREFIX}{minute}");
        let read = read_item(&self.client, table, key, consistent, &[DUE_COUNT]).await?;
        let Some(item) = read else {
            return Ok(0);
        };
        let count = Reader { table, item: &item }
            .opt_i64(DUE_COUNT)?
            .unwrap_or(0);
        Ok(u32::try_from(count.max(0)).unwrap_or(u32::MAX))
    }

    /// The cancel's transaction (TransactWriteItems): `record` (read just before) `scheduled`
    /// → `cancelled` if it still is, with no push left and its TTL not passed, and its
    /// tombstone `cancelled#<callId>` (`expireAt`: the record's). `None` when both are written;
    /// `Some` with the record as it is (`None`: none) when the update's condition refused it
    /// (then neither is written).
    async fn cancel_and_entomb(
        &self,
        record: &Reservation,
        now: DateTime<Utc>,
    ) -> Result<Option<Option<Reservation>>, StoreError> {
        let table = &self.tables.calls;
        let id = &record.device_id;
        let update = "SET #status = :cancelled, #updatedAt = :updatedAt REMOVE #dueShard";
        let condition = "#callId = :callId AND #status = :scheduled \
                         AND attribute_not_exists(#pushes) \
                         AND (attribute_not_exists(#expireAt) OR #expireAt > :nowSecs)";
        let (update_names, update_values) =
            mentioned(update, condition, call_values(&record.call_id, now, vec![]));
        let expire_at = record
            .expire_at
            .unwrap_or((now + crate::domain::reservation::UNFINISHED_EXPIRY).timestamp());
        let cancel = Update::builder()
            .table_name(table)
            .key(DEVICE_ID, s(id.as_str()))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_names(Some(update_names))
            .set_expression_attribute_values(update_values)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| StoreError::new(format!("cancel's update: {e}")))?;
        let tombstone = Put::builder()
            .table_name(table)
            .item(
                DEVICE_ID,
                s(format!("{CANCELLED_PREFIX}{}", record.call_id.as_str())),
            )
            .item(EXPIRE_AT, n(expire_at))
            .build()
            .map_err(|e| StoreError::new(format!("cancel's tombstone: {e}")))?;
        let result = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().update(cancel).build())
            .transact_items(TransactWriteItem::builder().put(tombstone).build())
            .client_request_token(transaction_token())
            .send()
            .await;
        let err = match result {
            Ok(_) => return Ok(None),
            Err(err) => err,
        };
        let refused = match err.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => cancelled
                .cancellation_reasons()
                .first()
                .filter(|reason| reason.code() == Some("ConditionalCheckFailed"))
                .map(|reason| reason.item().cloned()),
            _ => None,
        };
        let Some(old) = refused else {
            return Err(sdk_error("TransactWriteItems", table, err));
        };
        match old {
            Some(item) => Ok(Some(Some(reservation_from_item(table, &item)?))),
            // No item returned: none there, or a DynamoDB that does not return it; read it.
            None => Ok(Some(self.reservation_record(id, now).await?)),
        }
    }
}
