//! The DynamoDB adapter's items: reading attributes (naming the table and attribute in errors,
//! never a value) and a reservation to and from its item.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, SecondsFormat, Utc};

use super::{
    CALL_ID, CALLER_NAME, CLAIM_TOKEN, CLAIMED_AT_MS, CONFIRMS, CREATED_AT, DEVICE_ID, DUE_SHARD,
    EXPIRE_AT, FINISH_TOKEN, Item, MARK_BATCH_MS, NOTICE_CLAIM, NOTICE_RETRY, NOTICE_SENT_AT_MS,
    NOTICE_SHARD, PUSH_STARTED_AT_MS, PUSHES, RANG_AT_MS, SCHEDULED_AT, SCHEDULED_AT_MS, STATUS,
    UPDATED_AT, bad_item, n, s,
};
use crate::domain::device::DeviceId;
use crate::domain::due::shard_key;
use crate::domain::reservation::{
    CallId, Reservation, ReservationStatus, RunToken, ScheduledAt, rfc3339_millis,
};
use crate::store::StoreError;

/// Reads attributes of one item, naming the table and attribute in errors.
pub(super) struct Reader<'a> {
    pub(super) table: &'a str,
    pub(super) item: &'a Item,
}

impl<'a> Reader<'a> {
    pub(super) fn opt_s(&self, name: &str) -> Result<Option<&'a str>, StoreError> {
        match self.item.get(name) {
            None => Ok(None),
            Some(AttributeValue::S(v)) => Ok(Some(v.as_str())),
            Some(_) => Err(bad_item(self.table, name)),
        }
    }

    pub(super) fn s(&self, name: &str) -> Result<&'a str, StoreError> {
        self.opt_s(name)?.ok_or_else(|| bad_item(self.table, name))
    }

    pub(super) fn opt_i64(&self, name: &str) -> Result<Option<i64>, StoreError> {
        match self.item.get(name) {
            None => Ok(None),
            Some(AttributeValue::N(v)) => v
                .parse::<i64>()
                .map(Some)
                .map_err(|_| bad_item(self.table, name)),
            Some(_) => Err(bad_item(self.table, name)),
        }
    }

    pub(super) fn time(&self, name: &str) -> Result<DateTime<Utc>, StoreError> {
        DateTime::parse_from_rfc3339(self.s(name)?)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|_| bad_item(self.table, name))
    }

    pub(super) fn opt_time_ms(&self, name: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        self.opt_i64(name)?
            .map(|ms| DateTime::from_timestamp_millis(ms).ok_or_else(|| bad_item(self.table, name)))
            .transpose()
    }
}

/// A new reservation's item, in its minute's shard `due_shard` of the bucket index.
pub(super) fn reservation_item(r: &Reservation, due_shard: u32) -> Item {
    let mut item = HashMap::from([
        (DEVICE_ID.to_owned(), s(r.device_id.as_str())),
        (CALL_ID.to_owned(), s(r.call_id.as_str())),
        (
            SCHEDULED_AT.to_owned(),
            s(r.scheduled_at
                .with_offset()
                .to_rfc3339_opts(SecondsFormat::AutoSi, true)),
        ),
        (SCHEDULED_AT_MS.to_owned(), n(r.due_at.timestamp_millis())),
        (STATUS.to_owned(), s(r.status.as_str())),
        (CREATED_AT.to_owned(), s(rfc3339_millis(r.created_at))),
        (UPDATED_AT.to_owned(), s(rfc3339_millis(r.updated_at))),
    ]);
    let minute = r.scheduled_at.due_minute();
    let shard = shard_key(&minute, due_shard);
    // Kept after `dueShard` goes (the call ended): where its notice's release puts it back.
    item.insert(NOTICE_SHARD.to_owned(), s(shard.as_str()));
    item.insert(DUE_SHARD.to_owned(), s(shard));
    if let Some(name) = &r.caller_name {
        item.insert(CALLER_NAME.to_owned(), s(name.as_str()));
    }
    if let Some(claimed_at) = r.claimed_at {
        item.insert(CLAIMED_AT_MS.to_owned(), n(claimed_at.timestamp_millis()));
    }
    if let Some(started) = r.push_started_at {
        item.insert(PUSH_STARTED_AT_MS.to_owned(), n(started.timestamp_millis()));
    }
    if let Some(batch) = r.mark_batch {
        item.insert(MARK_BATCH_MS.to_owned(), n(batch.timestamp_millis()));
    }
    if let Some(expire_at) = r.expire_at {
        item.insert(EXPIRE_AT.to_owned(), n(expire_at));
    }
    if r.pushes > 0 {
        item.insert(PUSHES.to_owned(), n(r.pushes));
    }
    if r.confirms {
        item.insert(CONFIRMS.to_owned(), AttributeValue::Bool(true));
    }
    if let Some(rang_at) = r.rang_at {
        item.insert(RANG_AT_MS.to_owned(), n(rang_at.timestamp_millis()));
    }
    if let Some(sent_at) = r.notice_sent_at {
        item.insert(NOTICE_SENT_AT_MS.to_owned(), n(sent_at.timestamp_millis()));
    }
    if r.notice_retry {
        item.insert(NOTICE_RETRY.to_owned(), AttributeValue::Bool(true));
    }
    for (name, token) in [
        (CLAIM_TOKEN, &r.claimed_by),
        (FINISH_TOKEN, &r.finished_by),
        (NOTICE_CLAIM, &r.notice_claimed_by),
    ] {
        if let Some(token) = token {
            item.insert(name.to_owned(), s(token.as_str()));
        }
    }
    item
}

pub(super) fn reservation_from_item(table: &str, item: &Item) -> Result<Reservation, StoreError> {
    let r = Reader { table, item };
    let scheduled_at = DateTime::parse_from_rfc3339(r.s(SCHEDULED_AT)?)
        .map_err(|_| bad_item(table, SCHEDULED_AT))?;
    Ok(Reservation {
        call_id: CallId::from_stored(r.s(CALL_ID)?.to_owned()),
        device_id: DeviceId::from_stored(r.s(DEVICE_ID)?.to_owned()),
        scheduled_at: ScheduledAt::from_stored(scheduled_at),
        status: ReservationStatus::from_stored(r.s(STATUS)?)
            .ok_or_else(|| bad_item(table, STATUS))?,
        caller_name: r.opt_s(CALLER_NAME)?.map(str::to_owned),
        created_at: r.time(CREATED_AT)?,
        updated_at: r.time(UPDATED_AT)?,
        claimed_at: r.opt_time_ms(CLAIMED_AT_MS)?,
        push_started_at: r.opt_time_ms(PUSH_STARTED_AT_MS)?,
        mark_batch: r.opt_time_ms(MARK_BATCH_MS)?,
        claimed_by: r
            .opt_s(CLAIM_TOKEN)?
            .map(|t| RunToken::from_stored(t.to_owned())),
        finished_by: r
            .opt_s(FINISH_TOKEN)?
            .map(|t| RunToken::from_stored(t.to_owned())),
        due_at: due_at(&r, scheduled_at)?,
        pushes: u32::try_from(r.opt_i64(PUSHES)?.unwrap_or(0))
            .map_err(|_| bad_item(table, PUSHES))?,
        confirms: matches!(item.get(CONFIRMS), Some(AttributeValue::Bool(true))),
        rang_at: r.opt_time_ms(RANG_AT_MS)?,
        notice_claimed_by: r
            .opt_s(NOTICE_CLAIM)?
            .map(|t| RunToken::from_stored(t.to_owned())),
        notice_sent_at: r.opt_time_ms(NOTICE_SENT_AT_MS)?,
        notice_retry: matches!(item.get(NOTICE_RETRY), Some(AttributeValue::Bool(true))),
        expire_at: r.opt_i64(EXPIRE_AT)?,
    })
}

/// When the call's next push is due: `scheduledAtMs`, the bucket index's sort key; its
/// reserved second itself (to the nanosecond, as the client wrote it) while they are the same
/// millisecond, so that a first push is never a fraction of a millisecond early.
pub(super) fn due_at(
    r: &Reader<'_>,
    scheduled_at: DateTime<chrono::FixedOffset>,
) -> Result<DateTime<Utc>, StoreError> {
    let scheduled = scheduled_at.with_timezone(&Utc);
    Ok(match r.opt_time_ms(SCHEDULED_AT_MS)? {
        Some(due) if due.timestamp_millis() != scheduled.timestamp_millis() => due,
        _ => scheduled,
    })
}
