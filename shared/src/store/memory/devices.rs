//! The embedded store's devices port: registration against the device secret's state, proof,
//! and expiry by TTL (a record past `expireAt` is gone, as DynamoDB's reads treat it).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{MemoryStore, Tables};
use crate::domain::device::{AlertToken, Device, DeviceId, VoipToken};
use crate::store::prelude::*;
use crate::store::{DeviceProof, DeviceWrite, ProveRequest, RegisterRequest, StoreError};

#[async_trait]
impl DeviceStore for MemoryStore {
    async fn put_device(&self, device: &Device) -> Result<(), StoreError> {
        let mut tables = self.lock();
        tables
            .devices
            .insert(device.device_id.clone(), device.clone());
        // A plain put replaces the whole record, its secret included (as DynamoDB's PutItem).
        tables.device_secrets.remove(&device.device_id);
        tables
            .device_expiry
            .insert(device.device_id.clone(), device.expire_at());
        Ok(())
    }

    /// PUT /devices' write, at the device's `updated_at`.
    async fn register(&self, register: RegisterRequest<'_>) -> Result<DeviceWrite, StoreError> {
        let (device, presented) = (register.device, register.presented);
        let new_secret_hash = register.new_secret_hash;
        let tables = &mut *self.lock();
        let id = &device.device_id;
        tables.expire_device(id, device.updated_at);
        // A record whose token was removed keeps its secret: it still exists.
        let exists = tables.devices.contains_key(id) || tables.device_secrets.contains_key(id);
        let stored = tables.device_secrets.get(id).cloned();
        // This request's own new secret (its write made again after its reply was lost) is
        // answered as that write was, whatever was presented.
        let own = matches!(&stored, Some((hash, false)) if hash == new_secret_hash);
        let presented = presented.filter(|_| !own);
        let (secret, issued) = match (exists, stored, presented) {
            (true, Some((hash, _)), Some(p)) if hash == p => ((hash, true), false),
            (true, _, Some(_)) | (true, Some((_, true)), None) => return Ok(DeviceWrite::Refused),
            // New, from before secrets, or unproven (perhaps never delivered): a new secret.
            (false, _, _) | (true, None, None) | (true, Some((_, false)), None) => {
                ((new_secret_hash.to_owned(), false), true)
            }
        };
        let proven = secret.1;
        tables.devices.insert(id.clone(), device.clone());
        tables.device_secrets.insert(id.clone(), secret);
        tables.device_expiry.insert(id.clone(), device.expire_at());
        Ok(DeviceWrite::Written { issued, proven })
    }

    async fn get_device(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<Option<Device>, StoreError> {
        let mut tables = self.lock();
        tables.expire_device(id, now);
        Ok(tables.devices.get(id).cloned())
    }

    /// Whether the record (live at `now`) holds `secret_hash`.
    async fn prove(&self, proof: ProveRequest<'_>) -> Result<bool, StoreError> {
        let (id, secret_hash, now) = (proof.id, proof.secret_hash, proof.now);
        let tables = &mut *self.lock();
        tables.expire_device(id, now);
        Ok(match tables.device_secrets.get_mut(id) {
            Some((hash, proven)) if hash == secret_hash => {
                *proven = true;
                true
            }
            _ => false,
        })
    }

    async fn device_proof(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<DeviceProof, StoreError> {
        let tables = &mut *self.lock();
        tables.expire_device(id, now);
        let has_token = tables.devices.contains_key(id);
        let secret = tables.device_secrets.get(id);
        if !has_token && secret.is_none() {
            return Ok(DeviceProof::Unregistered);
        }
        Ok(DeviceProof::Registered {
            secret_hash: secret.map(|(hash, _)| hash.clone()),
            proven: secret.is_some_and(|(_, proven)| *proven),
            has_token,
        })
    }

    async fn remove_device(&self, id: &DeviceId, token: &VoipToken) -> Result<bool, StoreError> {
        let mut tables = self.lock();
        if tables
            .devices
            .get(id)
            .is_some_and(|d| &d.voip_token == token)
        {
            // The token goes; the secret and its state stay.
            tables.devices.remove(id);
            return Ok(true);
        }
        Ok(false)
    }

    async fn remove_alert_token(
        &self,
        id: &DeviceId,
        token: &AlertToken,
    ) -> Result<bool, StoreError> {
        let mut tables = self.lock();
        match tables.devices.get_mut(id) {
            Some(d) if d.alert_token.as_ref() == Some(token) => {
                d.alert_token = None;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

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
}
