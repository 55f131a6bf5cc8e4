//! The embedded store's device records: registration against the device secret's state,
//! proof, and expiry by TTL (a record past `expireAt` is gone, as DynamoDB's reads treat it).

use chrono::{DateTime, Utc};

use super::Tables;
use crate::domain::device::{Device, DeviceId};
use crate::store::{DeviceProof, DeviceWrite};

impl Tables {
    /// Forgets a device record past its TTL at `now` (as DynamoDB's TTL deletion would; the
    /// DynamoDB adapter reads such a record as absent before then).
    pub(super) fn expire_device(&mut self, id: &DeviceId, now: DateTime<Utc>) {
        if self
            .device_expiry
            .get(id)
            .is_some_and(|t| *t <= now.timestamp())
        {
            self.devices.remove(id);
            self.device_secrets.remove(id);
            self.device_expiry.remove(id);
        }
    }

    /// PUT /devices' write (`Store::register_device`), at the device's `updated_at`.
    pub(super) fn register(
        &mut self,
        device: &Device,
        presented: Option<&str>,
        new_secret_hash: &str,
    ) -> DeviceWrite {
        let id = &device.device_id;
        self.expire_device(id, device.updated_at);
        // A record whose token was removed keeps its secret: it still exists.
        let exists = self.devices.contains_key(id) || self.device_secrets.contains_key(id);
        let stored = self.device_secrets.get(id).cloned();
        let (secret, issued) = match (exists, stored, presented) {
            (false, _, _) => ((new_secret_hash.to_owned(), false), true),
            (true, Some((hash, _)), Some(p)) if hash == p => ((hash, true), false),
            (true, _, Some(_)) => return DeviceWrite::Refused,
            (true, Some((_, true)), None) => return DeviceWrite::Refused,
            (true, Some((hash, false)), None) => ((hash, false), false),
            (true, None, None) => ((new_secret_hash.to_owned(), false), true),
        };
        let proven = secret.1;
        self.devices.insert(id.clone(), device.clone());
        self.device_secrets.insert(id.clone(), secret);
        self.device_expiry.insert(id.clone(), device.expire_at());
        DeviceWrite::Written { issued, proven }
    }

    /// `Store::prove_device`: whether the record (live at `now`) holds `secret_hash`.
    pub(super) fn prove(&mut self, id: &DeviceId, secret_hash: &str, now: DateTime<Utc>) -> bool {
        self.expire_device(id, now);
        match self.device_secrets.get_mut(id) {
            Some((hash, proven)) if hash == secret_hash => {
                *proven = true;
                true
            }
            _ => false,
        }
    }

    /// `Store::device_proof` at `now`.
    pub(super) fn proof(&mut self, id: &DeviceId, now: DateTime<Utc>) -> DeviceProof {
        self.expire_device(id, now);
        let has_token = self.devices.contains_key(id);
        let secret = self.device_secrets.get(id);
        if !has_token && secret.is_none() {
            return DeviceProof::Unregistered;
        }
        DeviceProof::Registered {
            secret_hash: secret.map(|(hash, _)| hash.clone()),
            proven: secret.is_some_and(|(_, proven)| *proven),
            has_token,
        }
    }
}
