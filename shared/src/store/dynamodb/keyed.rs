//! The DynamoDB adapter's keyed records beside devices and reservations, under partition keys no
//! device id can take (device ids have no `#`):
//!
//! - scheduledCalls: the kept answers of `POST /calls` made with an `Idempotency-Key`:
//!   `deviceId` = `idempotency#<key>`, `requestHash` S, `answerStatus` N, `answerBody` S,
//!   `expireAt` N (TTL, 24 h). They carry no `dueShard`, so the dispatcher never sees them.
//! - agentUsage: each agent plan's answer counter (`deviceId` = `plan#<plan id>`, `day` =
//!   `answers`), and each public API's daily model tokens (`deviceId` = `spend#chat` or
//!   `spend#agent`, `day` = the Japan day, `useCount` = tokens; `day` = `<day>#notice`: its one
//!   ceiling notice; their keys: `store::UsageRequest::counter`). Also the counting itself
//!   ([`DynamoStore::add`]) of every counter.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{
    DAY, DEVICE_ID, DynamoStore, EXPIRE_AT, Reader, USE_COUNT, bad_item, n, names, s, written,
};
use super::{answered, offer, read_item, update_item};
use crate::store::prelude::*;
use crate::store::{IdempotentAnswer, StoreError, UsageRequest};
use aws_sdk_dynamodb::types::ReturnValue;

/// The token of a recent `ADD` on a counter, in one of [`ADD_SLOTS`] attributes (`lastAdd0`..)
/// chosen at random (see [`DynamoStore::add`]).
const LAST_ADD: &str = "lastAdd";
const ADD_SLOTS: u32 = 8;

/// Partition (in the reservations table) of an idempotent request's kept answer:
/// `idempotency#<key>`; device ids have no `#`, and these items carry no `dueShard`, so the
/// dispatcher's index never sees them.
const IDEMPOTENCY_PREFIX: &str = "idempotency#";
const REQUEST_HASH: &str = "requestHash";
const ANSWER_STATUS: &str = "answerStatus";
const ANSWER_BODY: &str = "answerBody";

/// One conditional `ADD` on the usage table's counter ([`DynamoStore::add`]).
#[async_trait]
impl UsageStore for DynamoStore {
    async fn add_to_counter(&self, request: UsageRequest<'_>) -> Result<Option<i64>, StoreError> {
        if request.limit() == Some(0) {
            // Nothing can be added (a missing counter would pass the condition).
            return Ok(None);
        }
        let (partition, sort) = request.counter();
        if request.reads() {
            return self.read_count(&partition, &sort).await.map(Some);
        }
        let (amount, limit) = (request.amount(), request.limit());
        self.add(&partition, &sort, amount, limit, request.expire_at())
            .await
    }
}

#[async_trait]
impl IdempotencyStore for DynamoStore {
    async fn idempotent_answer(
        &self,
        key: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<IdempotentAnswer>, StoreError> {
        let table = &self.tables.calls;
        let stored = format!("{IDEMPOTENCY_PREFIX}{key}");
        let Some(item) = read_item(&self.client, table, stored, true, &[]).await? else {
            return Ok(None);
        };
        let read = Reader { table, item: &item };
        let expire_at = read
            .opt_i64(EXPIRE_AT)?
            .ok_or_else(|| bad_item(table, EXPIRE_AT))?;
        if expire_at <= now.timestamp() {
            return Ok(None);
        }
        Ok(Some(IdempotentAnswer {
            key: key.to_owned(),
            request_hash: read.s(REQUEST_HASH)?.to_owned(),
            status: read
                .opt_i64(ANSWER_STATUS)?
                .and_then(|n| u16::try_from(n).ok())
                .ok_or_else(|| bad_item(table, ANSWER_STATUS))?,
            body: read.s(ANSWER_BODY)?.to_owned(),
            expire_at,
        }))
    }

    async fn keep_idempotent_answer(
        &self,
        answer: &IdempotentAnswer,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let table = &self.tables.calls;
        let result = self
            .client
            .put_item()
            .table_name(table)
            .item(DEVICE_ID, s(format!("{IDEMPOTENCY_PREFIX}{}", answer.key)))
            .item(REQUEST_HASH, s(answer.request_hash.as_str()))
            .item(ANSWER_STATUS, n(answer.status))
            .item(ANSWER_BODY, s(answer.body.as_str()))
            .item(EXPIRE_AT, n(answer.expire_at))
            .condition_expression("attribute_not_exists(#deviceId) OR #expireAt <= :nowSecs")
            .set_expression_attribute_names(Some(names(&[DEVICE_ID, EXPIRE_AT])))
            .expression_attribute_values(":nowSecs", n(now.timestamp()))
            .send()
            .await;
        written("PutItem", table, result)
    }
}

impl DynamoStore {
    /// The `useCount` of the usage table's item (`deviceId`, `day`), 0 when there is none: one
    /// eventually consistent GetItem of that attribute (half a read unit).
    async fn read_count(&self, partition: &str, sort: &str) -> Result<i64, StoreError> {
        let table = &self.tables.usage;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key(DEVICE_ID, s(partition))
            .key(DAY, s(sort))
            .consistent_read(false)
            .projection_expression("#useCount")
            .set_expression_attribute_names(Some(names(&[USE_COUNT])))
            .send()
            .await
            .map_err(|e| super::sdk_error("GetItem", table, e))?;
        let Some(item) = out.item else {
            return Ok(0);
        };
        Ok(Reader { table, item: &item }
            .opt_i64(USE_COUNT)?
            .unwrap_or(0))
    }

    /// One `ADD amount` to `useCount` of the usage table's item (`deviceId`, `day`), with
    /// `expireAt` set; with a `limit`, only while `useCount` is below it. The new count, or
    /// `None` when the limit had been reached (nothing added). Each call writes a token of its
    /// own in one of 8 attributes (`lastAdd0`..`lastAdd7`, at random) and refuses an item that
    /// already carries it there, so the SDK's retry of an add whose reply was lost does not
    /// add twice: it reads the count its first attempt left (`retried.rs`); other adds in
    /// between overwrite that token only if they drew the same attribute (1 in 8 each).
    async fn add(
        &self,
        partition: &str,
        sort: &str,
        amount: i64,
        limit: Option<u64>,
        expire_at: i64,
    ) -> Result<Option<i64>, StoreError> {
        let table = &self.tables.usage;
        let token = super::retried::write_token();
        let slot = format!("{LAST_ADD}{}", fastrand::u32(..ADD_SLOTS));
        let mut values = vec![
            (":amount", n(amount)),
            (":expireAt", n(expire_at)),
            (":token", s(token.clone())),
        ];
        let not_yet = format!("(attribute_not_exists(#{slot}) OR #{slot} <> :token)");
        let condition = match limit {
            Some(limit) => {
                values.push((":limit", n(limit)));
                format!("(attribute_not_exists(#useCount) OR #useCount < :limit) AND {not_yet}")
            }
            None => not_yet,
        };
        let request = update_item(
            &self.client,
            table,
            partition,
            &format!("ADD #useCount :amount SET #expireAt = :expireAt, #{slot} = :token"),
            &condition,
            offer(values),
        )
        .key(DAY, s(sort))
        .return_values(ReturnValue::UpdatedNew);
        let item = match answered(table, request).await? {
            Ok(new) => new,
            // Our own earlier attempt (its reply lost) already added: its count stands.
            Err(Some(old)) if old.get(&slot).and_then(|v| v.as_s().ok()) == Some(&token) => old,
            Err(_) => return Ok(None),
        };
        let count = Reader { table, item: &item }.opt_i64(USE_COUNT)?;
        Ok(Some(count.ok_or_else(|| bad_item(table, USE_COUNT))?))
    }
}
