//! The embedded store's bucket index: each `scheduled` or `claimed` reservation (and each ended
//! one whose notice was released) under its minute's shard, as DynamoDB's sparse `byDueShard`
//! index holds it.

use chrono::{DateTime, Utc};

use super::Tables;
use crate::domain::device::DeviceId;
use crate::domain::due::{COUNT_STEP, DueCall, raises_count, shard_key, shard_of, shards_for};
use crate::domain::reservation::Reservation;

impl Tables {
    /// Raises the minute's watch to `until` if it is before `below`; whether it was.
    pub(super) fn raise_watch(
        &mut self,
        minute: &str,
        below: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> bool {
        let watch = self
            .watches
            .entry(minute.to_owned())
            .or_insert(DateTime::<Utc>::MIN_UTC);
        let raised = *watch < below;
        if raised {
            *watch = (*watch).max(until);
        }
        raised
    }

    /// Puts a new reservation in its shard (replacing the device's earlier one there), its
    /// shard from the minute's count before it (shard 0 while there is none), and counts it as
    /// DynamoDB does: it adds [`COUNT_STEP`] if its call id is one that counts
    /// ([`raises_count`]). The count after it when this create raised it.
    pub(super) fn index_due(&mut self, reservation: &Reservation) -> Option<u32> {
        let id = &reservation.device_id;
        let minute = reservation.scheduled_at.due_minute();
        let count = self.due_counts.entry(minute.clone()).or_insert(0);
        let key = shard_key(&minute, shard_of(&reservation.call_id, shards_for(*count)));
        let raised = raises_count(&reservation.call_id).then(|| {
            *count = count.saturating_add(COUNT_STEP);
            *count
        });
        self.unindex(id);
        self.due_index
            .entry(key.clone())
            .or_default()
            .insert(id.clone());
        self.due_keys.insert(id.clone(), key.clone());
        // Kept past its end for its notice's release (DynamoDB's `noticeShard`).
        self.notice_keys.insert(id.clone(), key);
        raised
    }

    /// Takes the device's reservation out of the bucket index (it became terminal, or is gone).
    pub(super) fn unindex(&mut self, id: &DeviceId) {
        if let Some(key) = self.due_keys.remove(id)
            && let Some(devices) = self.due_index.get_mut(&key)
        {
            devices.remove(id);
            if devices.is_empty() {
                self.due_index.remove(&key);
            }
        }
    }

    /// Puts the device's ended call back in the shard it had (its notice released): whether it
    /// had one kept.
    pub(super) fn reindex_for_notice(&mut self, id: &DeviceId) -> bool {
        let Some(key) = self.notice_keys.get(id).cloned() else {
            return false;
        };
        self.due_index
            .entry(key.clone())
            .or_default()
            .insert(id.clone());
        self.due_keys.insert(id.clone(), key);
        true
    }

    /// The reservations in shard `shard` of `minute`, in time order.
    pub(super) fn due_calls(&self, minute: &str, shard: u32) -> Vec<DueCall> {
        let Some(devices) = self.due_index.get(&shard_key(minute, shard)) else {
            return Vec::new();
        };
        let mut due: Vec<DueCall> = devices
            .iter()
            .filter_map(|id| self.reservations.get(id))
            .map(DueCall::from)
            .collect();
        due.sort_by_key(|c| c.scheduled_at.utc());
        due
    }
}
