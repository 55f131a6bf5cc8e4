//! What each of the dispatcher's requests costs, read off the records as the adapter would send it.

use koe::domain::device::{Device, DeviceId};
use koe::domain::due::shard_key;
use koe::domain::reservation::{CallId, ReservationStatus, RunToken, terminal_expiry};
use koe::store::prelude::*;
use koe::store::{ClaimMark, DUE_INDEX, Op, Outcome, StoreError};
use serde_json::json;

use super::{ATTEMPTS, LimitedStore, Time, n, s};
use crate::dynamodb::limits::{Charge, Item, read_charge, write_charges};

impl LimitedStore {
    /// What the adapter's request for `op` costs on the records as they are, and the attempts
    /// it is sent with: once for the dispatcher's requests on a call (its dispatch client has
    /// no SDK retries: the dispatcher makes them again itself), the SDK's for the others.
    /// `None` for the API's requests.
    pub(super) async fn cost(&self, op: Op<'_>) -> Result<Option<(Vec<Charge>, u32)>, StoreError> {
        let cost = match op {
            Op::GetDevice(id, now) => (self.device_read(id, now).await?, 1),
            Op::RemoveDevice(id, _) => {
                // A dead token's removal: one conditional write on the device's key.
                let key = Item::from([("deviceId".to_owned(), s(id.as_str()))]);
                let charges = write_charges(&self.devices, &key, Some(&key), None);
                (charges, ATTEMPTS)
            }
            Op::GetReservation(id, now) => {
                // The record a miss was refused on: consistent, on the device's key.
                let current = self.current(id, now).await?;
                let item = current
                    .as_ref()
                    .map(|(r, key)| Self::call_item(r, key.as_deref()));
                let charge = read_charge(&self.calls, None, id.as_str(), item.as_ref(), true);
                (vec![charge], ATTEMPTS)
            }
            Op::ConfirmCall(id, _, now) => (self.confirm(id, now).await?, 1),
            Op::DueCount(minute) => (self.count_read(minute).await?, ATTEMPTS),
            Op::WatchMinute(minute, _) | Op::ClaimWake(minute, ..) => {
                // A run's watch, a create's claim of a wake: one small conditional update of
                // the minute's count item (a refusal pays its write too).
                let key = Item::from([("deviceId".to_owned(), s(&format!("due#{minute}")))]);
                let charges = write_charges(&self.calls, &key, Some(&key), Some(&key));
                (charges, ATTEMPTS)
            }
            Op::DueCalls(minute, shard) => (self.shard_query(minute, shard).await?, ATTEMPTS),
            Op::ClaimDue(id, call_id, run, now, abandoned_before, mark) => (
                self.claim(id, call_id, run, (now, abandoned_before), mark)
                    .await?,
                1,
            ),
            Op::MarkPushStarted(id, _, _, now, _) => (self.mark(id, now).await?, 1),
            Op::MarkBatch(run, batch, _) | Op::FenceBatch(run, batch, _) => {
                // A run's batch mark, or another's fence on it: one small conditional update of
                // its own item (a refusal pays its write too).
                let key = format!("mark#{}#{}", run.as_str(), batch.timestamp_millis());
                let item = Item::from([
                    ("deviceId".to_owned(), s(&key)),
                    ("markedAtMs".to_owned(), n(batch.timestamp_millis())),
                    ("expireAt".to_owned(), n(1_800_000_000)),
                ]);
                (write_charges(&self.calls, &item, None, Some(&item)), 1)
            }
            Op::SettleBatch(id, _, _, now, _, marked_at) => {
                (self.settle(id, now, marked_at).await?, 1)
            }
            Op::ReleaseClaim(id, _, _, now) => (self.release(id, now).await?, 1),
            Op::FinishReservation(id, _, outcome, _, now, _) => {
                (self.finish(id, outcome, now).await?, 1)
            }
            Op::ClaimNotice(id, _, _, now) => (self.notice(id, now, None).await?, 1),
            Op::NoticeSent(id, _, _, now) => {
                let kept = self.inner.due_key(id);
                (self.notice(id, now, kept).await?, 1)
            }
            Op::ReleaseNotice(id, _, _, now, _) => {
                let kept = self.inner.notice_key(id);
                (self.notice(id, now, kept).await?, 1)
            }
            _ => return Ok(None),
        };
        Ok(Some(cost))
    }

    /// The dispatcher's device read, 2 s before the second: consistent, on the device's key.
    async fn device_read(&self, id: &DeviceId, now: Time) -> Result<Vec<Charge>, StoreError> {
        let device = self.inner.get_device(id, now).await?;
        let item = device.as_ref().map(Self::device_item);
        let mut charge = read_charge(&self.devices, None, id.as_str(), item.as_ref(), true);
        charge.key = id.as_str().to_owned();
        Ok(vec![charge])
    }

    /// The device's item as the adapter writes it, its secret proven.
    pub fn device_item(d: &Device) -> Item {
        Item::from([
            ("deviceId".to_owned(), s(d.device_id.as_str())),
            ("voipToken".to_owned(), s(d.voip_token.expose())),
            ("environment".to_owned(), s(d.environment.as_str())),
            ("updatedAt".to_owned(), s("2026-01-01T00:00:00.000Z")),
            ("secretHash".to_owned(), s(&"0".repeat(64))),
            ("secretProven".to_owned(), json!({ "BOOL": true })),
        ])
    }

    /// A confirmation: one conditional update on the device's key, out of the index.
    async fn confirm(&self, id: &DeviceId, now: Time) -> Result<Vec<Charge>, StoreError> {
        let before = self.current(id, now).await?;
        let after = before.as_ref().map(|(r, _)| {
            let mut rang = r.clone();
            rang.status = ReservationStatus::Rang;
            rang.rang_at = Some(now);
            rang.expire_at = Some(terminal_expiry(now));
            rang
        });
        let after_ref = after.as_ref().map(|r| (r, None));
        Ok(self.update(id, None, before.as_ref(), after_ref))
    }

    /// A minute's count: eventually consistent, on its own key (`due#<minute>`).
    async fn count_read(&self, minute: &str) -> Result<Vec<Charge>, StoreError> {
        let count = self.inner.due_count(minute).await?;
        let key = format!("due#{minute}");
        let item = Item::from([
            ("deviceId".to_owned(), s(&key)),
            ("count".to_owned(), n(i64::from(count))),
            ("expireAt".to_owned(), n(1_800_000_000)),
        ]);
        let charge = read_charge(&self.calls, None, &key, (count > 0).then_some(&item), false);
        Ok(vec![charge])
    }

    /// A shard's query: eventually consistent, on the index partition, for every entry in it.
    async fn shard_query(&self, minute: &str, shard: u32) -> Result<Vec<Charge>, StoreError> {
        let calls = self.inner.due_calls(minute, shard).await?;
        let key = shard_key(minute, shard);
        let gsi = self.calls.gsi(DUE_INDEX).expect("the bucket index");
        let entries: Vec<Item> = calls
            .iter()
            .filter_map(|c| {
                let mut item = Self::call_base(&c.device_id, &c.call_id, &c.scheduled_at, c.due_at);
                item.insert("dueShard".to_owned(), s(&key));
                if let Some(name) = &c.caller_name {
                    item.insert("callerName".to_owned(), s(name));
                }
                self.calls.projected(gsi, &item)
            })
            .collect();
        let charge = read_charge(&self.calls, Some(DUE_INDEX), &key, &entries, false);
        Ok(vec![charge])
    }

    /// A claim: one conditional update on the device's key (with the push mark, if `mark` says
    /// so: still one write, of a slightly larger item).
    async fn claim(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        (now, abandoned_before): (Time, Time),
        mark: ClaimMark,
    ) -> Result<Vec<Charge>, StoreError> {
        let before = self.current(id, now).await?;
        let after = before.as_ref().and_then(|(r, key)| {
            let claimable = &r.call_id == call_id
                && match r.status {
                    ReservationStatus::Scheduled => true,
                    ReservationStatus::Claimed => {
                        r.claimed_by.as_ref() == Some(run)
                            || (r.push_started_at.is_none()
                                && r.mark_batch.is_none()
                                && r.claimed_at.is_some_and(|c| c < abandoned_before))
                    }
                    _ => false,
                };
            claimable.then(|| {
                let mut claimed = r.clone();
                claimed.status = ReservationStatus::Claimed;
                claimed.claimed_at = Some(now);
                claimed.mark_batch = match mark {
                    ClaimMark::InBatch(batch) => Some(batch),
                    ClaimMark::Apart => None,
                };
                (claimed, key.clone())
            })
        });
        // A refused condition still writes (and pays) the item as it was.
        let usual = before
            .as_ref()
            .is_some_and(|(r, _)| r.status == ReservationStatus::Scheduled && after.is_some());
        let after_ref = match &after {
            Some((r, key)) => Some((r, key.as_deref())),
            None => before.as_ref().map(|(r, key)| (r, key.as_deref())),
        };
        let name = match mark {
            ClaimMark::Apart => "claim",
            ClaimMark::InBatch(_) => "claim in batch",
        };
        Ok(self.update(id, usual.then_some(name), before.as_ref(), after_ref))
    }

    async fn mark(&self, id: &DeviceId, now: Time) -> Result<Vec<Charge>, StoreError> {
        let before = self.current(id, now).await?;
        let after = before.as_ref().map(|(r, key)| {
            let mut marked = r.clone();
            marked.push_started_at = Some(now);
            (marked, key.clone())
        });
        let usual = before.as_ref().is_some_and(|(r, _)| {
            r.status == ReservationStatus::Claimed && r.push_started_at.is_none()
        });
        let after_ref = after.as_ref().map(|(r, key)| (r, key.as_deref()));
        Ok(self.update(id, usual.then_some("mark"), before.as_ref(), after_ref))
    }

    /// A stopped run's claim settled by its batch's fence: one conditional update of the
    /// call's item (its batch named no more; the push mark, if the batch was marked).
    async fn settle(
        &self,
        id: &DeviceId,
        now: Time,
        marked_at: Option<Time>,
    ) -> Result<Vec<Charge>, StoreError> {
        let before = self.current(id, now).await?;
        let after = before.as_ref().map(|(r, key)| {
            let mut settled = r.clone();
            settled.mark_batch = None;
            settled.push_started_at = settled.push_started_at.or(marked_at);
            (settled, key.clone())
        });
        let after_ref = after.as_ref().map(|(r, key)| (r, key.as_deref()));
        Ok(self.update(id, None, before.as_ref(), after_ref))
    }

    /// A missed-call notice's claim, record or release: one conditional update of the finished
    /// call's item, the same size before and after, in the index partition `after` (none once
    /// claimed; the kept shard once released: one more index write each way, as the sparse
    /// index's entry goes or comes back).
    async fn notice(
        &self,
        id: &DeviceId,
        now: Time,
        after: Option<String>,
    ) -> Result<Vec<Charge>, StoreError> {
        let before = self.current(id, now).await?;
        let after_ref = before.as_ref().map(|(r, _)| (r, after.as_deref()));
        Ok(self.update(id, None, before.as_ref(), after_ref))
    }

    async fn release(&self, id: &DeviceId, now: Time) -> Result<Vec<Charge>, StoreError> {
        let before = self.current(id, now).await?;
        let after = before.as_ref().map(|(r, key)| {
            let mut released = r.clone();
            released.status = ReservationStatus::Scheduled;
            released.claimed_at = None;
            released.push_started_at = None;
            released.mark_batch = None;
            (released, key.clone())
        });
        let after_ref = after.as_ref().map(|(r, key)| (r, key.as_deref()));
        Ok(self.update(id, None, before.as_ref(), after_ref))
    }

    async fn finish(
        &self,
        id: &DeviceId,
        outcome: Outcome,
        now: Time,
    ) -> Result<Vec<Charge>, StoreError> {
        let before = self.current(id, now).await?;
        let after = before.as_ref().map(|(r, key)| {
            let mut finished = r.clone();
            finished.status = outcome.status();
            if let Outcome::Pushed { next_at, pushes } = outcome {
                // Due again: its index entry stays, its sort key moves.
                finished.pushes = pushes;
                finished.due_at = next_at;
                finished.claimed_at = None;
                finished.claimed_by = None;
                finished.push_started_at = None;
                finished.mark_batch = None;
                return (finished, key.clone());
            }
            finished.expire_at = Some(terminal_expiry(now));
            (finished, None)
        });
        let usual = before.as_ref().is_some_and(|(r, _)| {
            r.status == ReservationStatus::Claimed
                && (r.push_started_at.is_some() || r.mark_batch.is_some())
        });
        let name = match outcome {
            Outcome::Sent => "finish sent",
            Outcome::Failed => "finish failed",
            Outcome::Missed => "finish missed",
            Outcome::Pushed { .. } => "finish pushed",
            Outcome::Unconfirmed => "finish unconfirmed",
        };
        let after_ref = after.as_ref().map(|(r, key)| (r, key.as_deref()));
        Ok(self.update(id, usual.then_some(name), before.as_ref(), after_ref))
    }
}
