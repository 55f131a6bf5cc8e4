//! The DynamoDB adapter's dispatch requests: a minute's reservation count, the shard query, the
//! minute's watch (`watchedUntil` on the count item `due#<minute>`: a run's promise to select the
//! minute again until then, and a create's claim of the duty to wake such a run), the claim, the
//! mark that a push started (a write of its own on the call, or its batch's: `mark#<run>#<ms>`),
//! and the outcome (tokens against lost replies: `retried`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};

use super::conditions::{CLAIMABLE, CLAIMED_BY_RUN, NOT_EARLY};
use super::outcome::finish_request;
use super::reservations::DUE_COUNT_PREFIX;
use super::{
    CALL_ID, CALLER_NAME, DEVICE_ID, DUE_SHARD, DynamoStore, Item, PUSHES, Reader, SCHEDULED_AT,
    bad_item, n, names, reservation_from_item, s, sdk_error, values, written,
};
use super::{answered, call_values, offer, read_item, update_item};
use crate::domain::device::DeviceId;
use crate::domain::due::{DueCall, shard_key};
use crate::domain::reservation::{CallId, RunToken, ScheduledAt};
use crate::store::prelude::*;
use crate::store::{
    BATCH_TTL, BatchFence, BatchWrite, ClaimAnswer, ClaimCall, ClaimMark, DUE_INDEX,
    PUSH_AGAIN_CLAIM_LEAD, RunCall, RunWrite, StoreError, WakeClaim,
};

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

/// S: the call whose create claimed the minute's last wake.
const WAKE_CLAIMANT: &str = "wakeClaimant";
/// The sweep mark's item (`due#swept`, beside the minutes' count items) and attribute.
const SWEPT: &str = "swept";
const SWEPT_BEFORE: &str = "sweptBefore";
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

    /// `due#swept` in the calls table, `sweptBefore` (epoch ms): one eventually consistent
    /// read, made once per process (`dispatch::sweep`).
    async fn swept_before(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        let table = &self.tables.calls;
        let key = format!("{DUE_COUNT_PREFIX}{SWEPT}");
        let Some(item) = read_item(&self.dispatch, table, key, false, &[SWEPT_BEFORE]).await?
        else {
            return Ok(None);
        };
        let ms = Reader { table, item: &item }.opt_i64(SWEPT_BEFORE)?;
        Ok(ms.and_then(DateTime::from_timestamp_millis))
    }

    /// One conditional write (at most about once an hour: `dispatch::sweep`).
    async fn raise_swept_before(&self, at: DateTime<Utc>) -> Result<(), StoreError> {
        let table = &self.tables.calls;
        let result = update_item(
            &self.dispatch,
            table,
            format!("{DUE_COUNT_PREFIX}{SWEPT}"),
            "SET #sweptBefore = :at",
            "attribute_not_exists(#sweptBefore) OR #sweptBefore < :at",
            offer(vec![(":at", n(at.timestamp_millis()))]),
        )
        .send()
        .await;
        // Refused: another run raised it as far or further.
        written("UpdateItem", table, result).map(drop)
    }

    /// Raises the minute's `watchedUntil` to `until` (never lowers it: of overlapping runs the
    /// latest promise stands); a raised watch is no longer a create's claim (`wakeClaimant`
    /// goes). One write unit, on the dispatcher's client.
    async fn watch_minute(&self, minute: &str, until: DateTime<Utc>) -> Result<(), StoreError> {
        let table = &self.tables.calls;
        let result = update_item(
            &self.dispatch,
            table,
            format!("{DUE_COUNT_PREFIX}{minute}"),
            "SET #watchedUntil = :until, #expireAt = if_not_exists(#expireAt, :expireAt) \
             REMOVE #wakeClaimant",
            "attribute_not_exists(#watchedUntil) OR #watchedUntil < :until",
            watch_values(until, vec![]),
        )
        .send()
        .await;
        // Refused: another run promised as long or longer.
        written("UpdateItem", table, result).map(drop)
    }

    /// Raises the minute's `watchedUntil` to `until` unless it already reaches `due_at`
    /// (one conditional update: of creates at once, one wins), and names the `claimant` in
    /// `wakeClaimant`. A refusal is `false`, unless the claim that stands is the claimant's own
    /// (its earlier attempt was applied and its reply lost, or an SDK retry of this one).
    async fn wake_claim(&self, wake: WakeClaim<'_>) -> Result<bool, StoreError> {
        let table = &self.tables.calls;
        let offered = vec![
            (":due", n(wake.due_at.timestamp_millis())),
            (":claimant", s(wake.claimant)),
        ];
        let request = update_item(
            &self.client,
            table,
            format!("{DUE_COUNT_PREFIX}{}", wake.minute),
            "SET #watchedUntil = :until, #wakeClaimant = :claimant, \
             #expireAt = if_not_exists(#expireAt, :expireAt)",
            "attribute_not_exists(#watchedUntil) OR #watchedUntil < :due",
            watch_values(wake.until, offered),
        );
        let Err(old) = answered(table, request).await? else {
            return Ok(true);
        };
        Ok(old
            .and_then(|old| old.get(WAKE_CLAIMANT).cloned())
            .is_some_and(|by| by.as_s().is_ok_and(|by| by == wake.claimant)))
    }

    async fn claim_call(&self, claim: ClaimCall<'_>) -> Result<ClaimAnswer, StoreError> {
        let (table, now) = (&self.tables.calls, claim.call.now);
        let due_by = now + PUSH_AGAIN_CLAIM_LEAD;
        let mut offered = vec![
            (
                ":abandonedBeforeMs",
                n(claim.abandoned_before.timestamp_millis()),
            ),
            (":run", s(claim.call.run.as_str())),
            (":dueByMs", n(due_by.timestamp_millis())),
        ];
        // In a batch: the claim names it (a claim taken over from a settled one names its own).
        let update = match claim.mark {
            ClaimMark::Apart => {
                "SET #status = :claimed, #claimedAtMs = :nowMs, #updatedAt = :updatedAt, \
                 #claimToken = :run REMOVE #markBatchMs"
            }
            ClaimMark::InBatch(batch) => {
                offered.push((":batchMs", n(batch.timestamp_millis())));
                "SET #status = :claimed, #claimedAtMs = :nowMs, #updatedAt = :updatedAt, \
                 #claimToken = :run, #markBatchMs = :batchMs"
            }
        };
        let request = update_item(
            &self.dispatch,
            table,
            claim.call.id.as_str(),
            update,
            &format!("(({CLAIMABLE}) AND {NOT_EARLY}) OR ({CLAIMED_BY_RUN})"),
            call_values(claim.call.call_id, now, offered),
        )
        .return_values(ReturnValue::AllNew);
        let old = match answered(table, request).await? {
            Ok(item) => {
                let pushes = Reader { table, item: &item }.opt_i64(PUSHES)?.unwrap_or(0);
                let pushes = u32::try_from(pushes).map_err(|_| bad_item(table, PUSHES))?;
                return Ok(ClaimAnswer::Won { pushes });
            }
            Err(old) => old,
        };
        let current = old
            .map(|item| reservation_from_item(table, &item))
            .transpose()?;
        Ok(ClaimAnswer::Refused(
            current.filter(|r| !r.is_expired(now)).map(Box::new),
        ))
    }

    /// The batch's item's `markedAtMs` (the first mark's), unless a fence came first; or its
    /// `fencedAtMs`, unless it is marked: a fence's refusal carries the mark's time.
    async fn batch_write(&self, w: BatchWrite<'_>) -> Result<BatchFence, StoreError> {
        let table = &self.tables.calls;
        let (run, now) = ((w.run, w.batch), w.now);
        if let BatchFence::Marked(_) = w.offer {
            let mark = batch_update(self, run, now, MARKED_AT_MS, FENCED_AT_MS);
            let stands = written("UpdateItem", table, mark.send().await)?;
            return Ok(if stands { w.offer } else { BatchFence::Fenced });
        }
        let request = batch_update(self, run, now, FENCED_AT_MS, MARKED_AT_MS);
        match answered(table, request).await? {
            Ok(_) => Ok(BatchFence::Fenced),
            Err(old) => {
                let old = old.ok_or_else(|| bad_item(table, MARKED_AT_MS))?;
                let marked = Reader { table, item: &old }.opt_time_ms(MARKED_AT_MS)?;
                Ok(BatchFence::Marked(
                    marked.ok_or_else(|| bad_item(table, MARKED_AT_MS))?,
                ))
            }
        }
    }

    /// One conditional update of the call's item, on the dispatcher's client (`:run`, `:true`,
    /// and [`call_values`] offered): whether its condition held.
    async fn run_write(&self, call: RunCall<'_>, write: RunWrite) -> Result<bool, StoreError> {
        let table = &self.tables.calls;
        let (update, condition, mut offered) = run_request(write, call);
        offered.extend([
            (":run", s(call.run.as_str())),
            (":true", AttributeValue::Bool(true)),
        ]);
        let result = update_item(
            &self.dispatch,
            table,
            call.id.as_str(),
            update,
            &condition,
            call_values(call.call_id, call.now, offered),
        )
        .send()
        .await;
        written("UpdateItem", table, result)
    }
}

/// A run's write as one update: its update and condition expressions, and the values it
/// offers beyond those [`DispatchStore::run_write`] offers to all.
fn run_request(
    write: RunWrite,
    call: RunCall<'_>,
) -> (&'static str, String, Vec<(&'static str, AttributeValue)>) {
    match write {
        // Made again after a lost reply, it meets its own claim and keeps the first time.
        RunWrite::MarkPushStarted { confirms: true } => (
            "SET #pushStartedAtMs = if_not_exists(#pushStartedAtMs, :nowMs), #confirms = :true",
            CLAIMED_BY_RUN.to_owned(),
            vec![],
        ),
        RunWrite::MarkPushStarted { confirms: false } => (
            "SET #pushStartedAtMs = if_not_exists(#pushStartedAtMs, :nowMs)",
            CLAIMED_BY_RUN.to_owned(),
            vec![],
        ),
        // Made again after a lost reply, it finds the call `scheduled`: released.
        RunWrite::Release => (
            "SET #status = :scheduled, #updatedAt = :updatedAt \
             REMOVE #claimedAtMs, #claimToken, #pushStartedAtMs, #markBatchMs",
            format!("({CLAIMED_BY_RUN}) OR (#callId = :callId AND #status = :scheduled)"),
            vec![],
        ),
        RunWrite::Finish {
            outcome,
            abandoned_before,
        } => {
            let finished = finish_request(outcome, call.run, call.now, abandoned_before);
            (finished.update, finished.condition, finished.values)
        }
        // A notice released for a later run leaves the bucket index with its claim.
        RunWrite::ClaimNotice => (
            "SET #noticeClaim = :run REMOVE #dueShard, #noticeRetry",
            NOTICE_CLAIMABLE.to_owned(),
            vec![],
        ),
        // Back in the index entry the call had (`noticeShard`), due at `retry_at`. Made again
        // after a lost reply, it finds the call released, due then, and unclaimed.
        RunWrite::ReleaseNotice { retry_at } => (
            "SET #dueShard = #noticeShard, #scheduledAtMs = :retryAtMs, #noticeRetry = :true \
             REMOVE #noticeClaim",
            "#callId = :callId AND #status IN (:failed, :missed, :unconfirmed) \
             AND attribute_exists(#noticeShard) AND attribute_not_exists(#noticeSentAtMs) \
             AND (#noticeClaim = :run \
             OR (attribute_not_exists(#noticeClaim) AND #noticeRetry = :true \
                 AND #scheduledAtMs = :retryAtMs))"
                .to_owned(),
            vec![(":retryAtMs", n(retry_at.timestamp_millis()))],
        ),
        // On the claim of `call.run` (the claimant, whose run is gone) naming `batch`: made
        // again after a lost reply, it finds the claim settled and answers false.
        RunWrite::SettleBatch { batch, marked_at } => {
            let mut offered = vec![(":batchMs", n(batch.timestamp_millis()))];
            let update = match marked_at {
                Some(at) => {
                    offered.push((":markedAtMs", n(at.timestamp_millis())));
                    "SET #pushStartedAtMs = if_not_exists(#pushStartedAtMs, :markedAtMs) \
                     REMOVE #markBatchMs"
                }
                None => "REMOVE #markBatchMs",
            };
            (
                update,
                format!("{CLAIMED_BY_RUN} AND #markBatchMs = :batchMs"),
                offered,
            )
        }
        RunWrite::NoticeSent => (
            "SET #noticeSentAtMs = if_not_exists(#noticeSentAtMs, :nowMs)",
            "#callId = :callId AND #noticeClaim = :run".to_owned(),
            vec![],
        ),
    }
}

/// N: when a run marked its batch of pushes (`mark#<run>#<batch ms>`; `fencedAtMs` if another
/// run fenced it first).
const MARKED_AT_MS: &str = "markedAtMs";
const FENCED_AT_MS: &str = "fencedAtMs";

/// `mark#<run>#<batch ms>` in the calls table: its time `set` (the first kept), unless it holds
/// `unless`. A mark and a fence are each other's `unless`, so of the two the first written
/// stands. One write unit, on the dispatcher's client; the item lives a day (`expireAt`).
fn batch_update(
    store: &DynamoStore,
    (run, batch): (&RunToken, DateTime<Utc>),
    now: DateTime<Utc>,
    set: &str,
    unless: &str,
) -> UpdateItemFluentBuilder {
    update_item(
        &store.dispatch,
        &store.tables.calls,
        batch_key(run, batch),
        &format!(
            "SET #{set} = if_not_exists(#{set}, :nowMs), \
             #expireAt = if_not_exists(#expireAt, :expireAt)"
        ),
        &format!("attribute_not_exists(#{unless})"),
        batch_values(batch, now),
    )
}

/// The item of `run`'s batch of pushes due at `batch`.
fn batch_key(run: &RunToken, batch: DateTime<Utc>) -> String {
    format!("mark#{}#{}", run.as_str(), batch.timestamp_millis())
}

/// A batch write's values: `:nowMs` and the item's TTL.
fn batch_values(batch: DateTime<Utc>, now: DateTime<Utc>) -> Vec<(String, AttributeValue)> {
    offer(vec![
        (":nowMs", n(now.timestamp_millis())),
        (":expireAt", n((batch + BATCH_TTL).timestamp())),
    ])
}

/// The notice's claim is `run`'s, or free on a call that ended badly.
const NOTICE_CLAIMABLE: &str = "#callId = :callId AND #status IN (:failed, :missed, :unconfirmed) \
     AND (attribute_not_exists(#noticeClaim) OR #noticeClaim = :run)";

/// A watch's values: `:until` and the count item's TTL (`:expireAt`), with `more`.
fn watch_values(
    until: DateTime<Utc>,
    more: Vec<(&str, AttributeValue)>,
) -> Vec<(String, AttributeValue)> {
    let mut values = vec![
        (":until", n(until.timestamp_millis())),
        (":expireAt", n((until + WATCH_TTL).timestamp())),
    ];
    values.extend(more);
    offer(values)
}
