//! The DynamoDB adapter's devices: their items, and PUT /devices' write with the device secret
//! (`secretHash` S: SHA-256 hex of the device secret; `secretProven` BOOL: the app has presented
//! it, and every later write must), read and then written under a condition that the secret's
//! state is still what was read (or holds this request's own new secret), so two racing writes
//! cannot both pass the check.

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};

use super::{
    DEVICE_ID, DynamoStore, ENVIRONMENT, EXPIRE_AT, Item, Reader, UPDATED_AT, VOIP_TOKEN, bad_item,
    condition_failed, n, names, s, sdk_error, values, written,
};
use super::{offer, read_item, update_item};
use crate::domain::device::Device;
use crate::domain::device::{AlertToken, DeviceId, PushEnvironment, VoipToken};
use crate::domain::reservation::rfc3339_millis;
use crate::store::prelude::*;
use crate::store::{DeviceProof, DeviceWrite, ProveRequest, RegisterRequest, StoreError};
use std::collections::HashMap;

use chrono::{DateTime, Utc};

const SECRET_HASH: &str = "secretHash";
/// BOOL, present only when true: the device's app confirms its call pushes.
const CONFIRMS_CALLS: &str = "confirmsCalls";
const SECRET_PROVEN: &str = "secretProven";
/// S, present only when the app registered one: the missed-call notice's token.
pub(super) const ALERT_TOKEN: &str = "alertToken";
/// Reads and conditional writes before giving up on a record that keeps changing.
pub const ATTEMPTS: u32 = 2;

#[async_trait]
impl DeviceStore for DynamoStore {
    async fn register(&self, register: RegisterRequest<'_>) -> Result<DeviceWrite, StoreError> {
        let (device, presented) = (register.device, register.presented);
        let new_secret_hash = register.new_secret_hash;
        let table = &self.tables.devices;
        for _ in 0..ATTEMPTS {
            let key = device.device_id.as_str();
            let attributes = [DEVICE_ID, SECRET_HASH, SECRET_PROVEN, EXPIRE_AT];
            let read = read_item(&self.client, table, key, true, &attributes).await?;
            let now = device.updated_at.timestamp();
            // A record past its TTL is no record (DynamoDB deletes it late): registered anew.
            let live = read.as_ref().filter(|item| !expired(item, now));
            let stored = live.map(|item| {
                let hash = item.get(SECRET_HASH).and_then(|v| v.as_s().ok()).cloned();
                let proven = item
                    .get(SECRET_PROVEN)
                    .and_then(|v| v.as_bool().ok())
                    .copied()
                    .unwrap_or(false);
                (hash, proven)
            });
            // Whether the request proves the stored secret, and the condition that the record
            // is still as read. Every other write stores `new_secret_hash` (`issued`); its
            // condition also accepts the item holding it unproven, this request's own write made
            // again by the SDK after its reply was lost (retried.rs), as does the read here when
            // the registration is made again, whatever it presented.
            let own = matches!(&stored, Some((Some(hash), false)) if hash == new_secret_hash);
            let presented = presented.filter(|_| !own);
            let (proven, condition, mut bound) = match (&stored, presented) {
                (Some((Some(hash), _)), Some(p)) if hash == p => (
                    true,
                    "#secretHash = :readHash",
                    vec![(":readHash", s(hash.clone()))],
                ),
                (Some(_), Some(_)) | (Some((_, true)), None) => return Ok(DeviceWrite::Refused),
                // An unproven secret (perhaps never delivered: its answer was lost) is replaced.
                (Some((Some(hash), false)), None) => (
                    false,
                    "#secretHash IN (:readHash, :newHash) AND (attribute_not_exists(#secretProven) OR #secretProven = :false)",
                    vec![(":readHash", s(hash.clone()))],
                ),
                (None, _) => (
                    false,
                    "attribute_not_exists(#deviceId) OR #expireAt <= :now OR #secretHash = :newHash",
                    vec![(":now", n(now))],
                ),
                (Some((None, false)), None) => (
                    false,
                    "(attribute_exists(#deviceId) AND attribute_not_exists(#secretHash)) OR #secretHash = :newHash",
                    vec![],
                ),
            };
            let issued = !proven;
            let hash = match presented {
                Some(p) if proven => p.to_owned(),
                _ => new_secret_hash.to_owned(),
            };
            if condition.contains(":newHash") {
                bound.push((":newHash", s(new_secret_hash)));
            }
            if condition.contains(":false") {
                bound.push((":false", AttributeValue::Bool(false)));
            }
            let mut item = device_item(device);
            item.insert(SECRET_HASH.to_owned(), s(hash));
            item.insert(SECRET_PROVEN.to_owned(), AttributeValue::Bool(proven));
            let used: Vec<&str> = [DEVICE_ID, SECRET_HASH, SECRET_PROVEN, EXPIRE_AT]
                .into_iter()
                .filter(|name| condition.contains(&format!("#{name}")))
                .collect();
            let result = self
                .client
                .put_item()
                .table_name(table)
                .set_item(Some(item))
                .condition_expression(condition)
                .set_expression_attribute_names(Some(names(&used)))
                .set_expression_attribute_values((!bound.is_empty()).then(|| values(bound)))
                .send()
                .await;
            match result {
                Ok(_) => return Ok(DeviceWrite::Written { issued, proven }),
                Err(e) if condition_failed(&e) => continue, // changed since read: again
                Err(e) => return Err(sdk_error("PutItem", table, e)),
            }
        }
        Err(StoreError::new(format!(
            "DynamoDB item in {table} kept changing during a device registration"
        )))
    }

    async fn put_device(&self, device: &Device) -> Result<(), StoreError> {
        let table = &self.tables.devices;
        self.client
            .put_item()
            .table_name(table)
            .set_item(Some(device_item(device)))
            .send()
            .await
            .map_err(|e| sdk_error("PutItem", table, e))?;
        Ok(())
    }

    async fn get_device(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<Option<Device>, StoreError> {
        // With retries, unless this is the dispatcher's store (`DynamoStore::for_dispatcher`).
        let table = &self.tables.devices;
        match read_item(&self.device_reads, table, id.as_str(), true, &[]).await? {
            Some(item) if !expired(&item, now.timestamp()) => device_from_item(table, &item),
            _ => Ok(None),
        }
    }

    async fn device_proof(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<DeviceProof, StoreError> {
        let table = &self.tables.devices;
        let attributes = [DEVICE_ID, SECRET_HASH, SECRET_PROVEN, VOIP_TOKEN, EXPIRE_AT];
        let read = read_item(&self.client, table, id.as_str(), true, &attributes).await?;
        let Some(item) = read.filter(|i| !expired(i, now.timestamp())) else {
            return Ok(DeviceProof::Unregistered);
        };
        let item = &item;
        let r = Reader { table, item };
        let secret_hash = r.opt_s(SECRET_HASH)?.map(str::to_owned);
        let has_token = item.contains_key(VOIP_TOKEN);
        if !has_token && secret_hash.is_none() {
            return Ok(DeviceProof::Unregistered);
        }
        Ok(DeviceProof::Registered {
            secret_hash,
            proven: matches!(item.get(SECRET_PROVEN), Some(AttributeValue::Bool(true))),
            has_token,
        })
    }

    /// `secretProven` set on the device's record if it still holds `secret_hash` and has not
    /// expired; whether it does.
    async fn prove(&self, proof: ProveRequest<'_>) -> Result<bool, StoreError> {
        let (id, secret_hash, now) = (proof.id, proof.secret_hash, proof.now);
        let result = self
            .update_device(
                id,
                "SET #secretProven = :true",
                "#secretHash = :hash AND (attribute_not_exists(#expireAt) OR #expireAt > :now)",
                offer(vec![
                    (":true", AttributeValue::Bool(true)),
                    (":hash", s(secret_hash)),
                    (":now", n(now.timestamp())),
                ]),
            )
            .send()
            .await;
        written("UpdateItem", &self.tables.devices, result)
    }

    /// Removes the token (its environment and alert token with it) if it is still `token`; the
    /// item, with the
    /// device's secret, stays. An item left with neither token nor secret (a device registered
    /// before secrets) is deleted, as the memory store has no record of it either.
    async fn remove_device(&self, id: &DeviceId, token: &VoipToken) -> Result<bool, StoreError> {
        let table = &self.tables.devices;
        let result = self
            .remove_held(
                id,
                "#voipToken, #environment, #alertToken",
                VOIP_TOKEN,
                token.expose(),
            )
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        let left = match result {
            Ok(out) => out.attributes().cloned().unwrap_or_default(),
            Err(e) if condition_failed(&e) => return Ok(false),
            Err(e) => return Err(sdk_error("UpdateItem", table, e)),
        };
        if !left.contains_key(SECRET_HASH) {
            let deleted = self
                .client
                .delete_item()
                .table_name(table)
                .key(DEVICE_ID, s(id.as_str()))
                .condition_expression(
                    "attribute_not_exists(#voipToken) AND attribute_not_exists(#secretHash)",
                )
                .set_expression_attribute_names(Some(names(&[VOIP_TOKEN, SECRET_HASH])))
                .send()
                .await;
            if let Err(e) = written("DeleteItem", table, deleted) {
                // Harmless: a record with neither token nor secret reads as unregistered.
                tracing::warn!(error = %e, "a device record without token or secret was not deleted");
            }
        }
        Ok(true)
    }

    async fn remove_alert_token(
        &self,
        id: &DeviceId,
        token: &AlertToken,
    ) -> Result<bool, StoreError> {
        let result = self
            .remove_held(id, "#alertToken", ALERT_TOKEN, token.expose())
            .send()
            .await;
        written("UpdateItem", &self.tables.devices, result)
    }
}

impl DynamoStore {
    /// An `UpdateItem` that removes `attributes` from the device's record while its `held`
    /// attribute is still `token` (a newer token wins).
    fn remove_held(
        &self,
        id: &DeviceId,
        attributes: &str,
        held: &str,
        token: &str,
    ) -> UpdateItemFluentBuilder {
        self.update_device(
            id,
            &format!("REMOVE {attributes}"),
            &format!("#{held} = :token"),
            offer(vec![(":token", s(token))]),
        )
    }

    /// An `UpdateItem` of the device's record: `update` under `condition`, with the `offered`
    /// values.
    fn update_device(
        &self,
        id: &DeviceId,
        update: &str,
        condition: &str,
        offered: Vec<(String, AttributeValue)>,
    ) -> UpdateItemFluentBuilder {
        update_item(
            &self.client,
            &self.tables.devices,
            id.as_str(),
            update,
            condition,
            offered,
        )
    }
}

/// Whether a device item is past its TTL at `now` (epoch seconds): absent to every read.
pub(super) fn expired(item: &Item, now: i64) -> bool {
    matches!(item.get(EXPIRE_AT), Some(AttributeValue::N(t)) if t.parse::<i64>().is_ok_and(|t| t <= now))
}

/// A device's item; it expires (TTL `expireAt`) [`DEVICE_RETENTION`] after its last write, so
/// the tokens of abandoned installs do not stay for ever (every PUT /devices renews it).
pub(super) fn device_item(device: &Device) -> Item {
    let mut item = HashMap::from([
        (DEVICE_ID.to_owned(), s(device.device_id.as_str())),
        (VOIP_TOKEN.to_owned(), s(device.voip_token.expose())),
        (ENVIRONMENT.to_owned(), s(device.environment.as_str())),
        (UPDATED_AT.to_owned(), s(rfc3339_millis(device.updated_at))),
        (EXPIRE_AT.to_owned(), n(device.expire_at())),
    ]);
    if device.confirms_calls {
        item.insert(CONFIRMS_CALLS.to_owned(), AttributeValue::Bool(true));
    }
    if let Some(token) = &device.alert_token {
        item.insert(ALERT_TOKEN.to_owned(), s(token.expose()));
    }
    item
}

/// The device, if its item has a token (`None` once APNs called it dead and it was removed).
pub(super) fn device_from_item(table: &str, item: &Item) -> Result<Option<Device>, StoreError> {
    if !item.contains_key(VOIP_TOKEN) {
        return Ok(None);
    }
    let r = Reader { table, item };
    Ok(Some(Device {
        device_id: DeviceId::from_stored(r.s(DEVICE_ID)?.to_owned()),
        voip_token: VoipToken::from_stored(r.s(VOIP_TOKEN)?.to_owned()),
        environment: PushEnvironment::from_stored(r.s(ENVIRONMENT)?)
            .ok_or_else(|| bad_item(table, ENVIRONMENT))?,
        updated_at: r.time(UPDATED_AT)?,
        confirms_calls: matches!(item.get(CONFIRMS_CALLS), Some(AttributeValue::Bool(true))),
        alert_token: r
            .opt_s(ALERT_TOKEN)?
            .map(|t| AlertToken::from_stored(t.to_owned())),
    }))
}
