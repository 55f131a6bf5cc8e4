//! The DynamoDB adapter's devices: their items, and PUT /devices' write with the device secret
//! (`secretHash` S: SHA-256 hex of the device secret; `secretProven` BOOL: the app has presented
//! it, and every later write must), read and then written under a condition that the secret's
//! state is still what was read, so two racing writes cannot both pass the check.

use aws_sdk_dynamodb::types::AttributeValue;

use super::{
    DEVICE_ID, DynamoStore, ENVIRONMENT, Item, Reader, UPDATED_AT, VOIP_TOKEN, bad_item,
    condition_failed, names, s, sdk_error, values,
};
use crate::domain::device::Device;
use crate::domain::device::{DeviceId, PushEnvironment, VoipToken};
use crate::domain::reservation::rfc3339_millis;
use crate::store::{DeviceProof, DeviceWrite, StoreError};
use std::collections::HashMap;

const SECRET_HASH: &str = "secretHash";
const SECRET_PROVEN: &str = "secretProven";
/// Reads and conditional writes before giving up on a record that keeps changing.
pub const ATTEMPTS: u32 = 2;

/// What [`DynamoStore::register_device_item`] answers.
pub(super) type WriteResult = Result<DeviceWrite, StoreError>;

impl DynamoStore {
    pub(super) async fn register_device_item(
        &self,
        device: &Device,
        presented: Option<&str>,
        new_secret_hash: &str,
    ) -> Result<DeviceWrite, StoreError> {
        let table = &self.tables.devices;
        for _ in 0..ATTEMPTS {
            let read = self
                .client
                .get_item()
                .table_name(table)
                .key(DEVICE_ID, s(device.device_id.as_str()))
                .consistent_read(true)
                .projection_expression("#deviceId, #secretHash, #secretProven")
                .set_expression_attribute_names(Some(names(&[
                    DEVICE_ID,
                    SECRET_HASH,
                    SECRET_PROVEN,
                ])))
                .send()
                .await
                .map_err(|e| sdk_error("GetItem", table, e))?;
            let stored = read.item().map(|item| {
                let hash = item.get(SECRET_HASH).and_then(|v| v.as_s().ok()).cloned();
                let proven = item
                    .get(SECRET_PROVEN)
                    .and_then(|v| v.as_bool().ok())
                    .copied()
                    .unwrap_or(false);
                (hash, proven)
            });
            // What to write, and the condition that the record is still as read.
            let (hash, proven, issued, condition, mut bound) = match (&stored, presented) {
                (None, _) => (
                    new_secret_hash.to_owned(),
                    false,
                    true,
                    "attribute_not_exists(#deviceId)",
                    vec![],
                ),
                (Some((Some(hash), _)), Some(p)) if hash == p => (
                    hash.clone(),
                    true,
                    false,
                    "#secretHash = :readHash",
                    vec![(":readHash", s(hash.clone()))],
                ),
                (Some(_), Some(_)) | (Some((_, true)), None) => return Ok(DeviceWrite::Refused),
                (Some((Some(hash), false)), None) => (
                    hash.clone(),
                    false,
                    false,
                    "#secretHash = :readHash AND (attribute_not_exists(#secretProven) OR #secretProven = :false)",
                    vec![(":readHash", s(hash.clone()))],
                ),
                (Some((None, false)), None) => (
                    new_secret_hash.to_owned(),
                    false,
                    true,
                    "attribute_exists(#deviceId) AND attribute_not_exists(#secretHash)",
                    vec![],
                ),
            };
            if condition.contains(":false") {
                bound.push((":false", AttributeValue::Bool(false)));
            }
            let mut item = device_item(device);
            item.insert(SECRET_HASH.to_owned(), s(hash));
            item.insert(SECRET_PROVEN.to_owned(), AttributeValue::Bool(proven));
            let used: Vec<&str> = [DEVICE_ID, SECRET_HASH, SECRET_PROVEN]
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
        Err(StoreError(format!(
            "DynamoDB item in {table} kept changing during a device registration"
        )))
    }
}

impl DynamoStore {
    pub(super) async fn device_proof_item(&self, id: &DeviceId) -> Result<DeviceProof, StoreError> {
        let table = &self.tables.devices;
        let read = self
            .client
            .get_item()
            .table_name(table)
            .key(DEVICE_ID, s(id.as_str()))
            .consistent_read(true)
            .projection_expression("#deviceId, #secretHash, #secretProven")
            .set_expression_attribute_names(Some(names(&[DEVICE_ID, SECRET_HASH, SECRET_PROVEN])))
            .send()
            .await
            .map_err(|e| sdk_error("GetItem", table, e))?;
        let Some(item) = read.item() else {
            return Ok(DeviceProof::Unregistered);
        };
        let r = Reader { table, item };
        Ok(DeviceProof::Registered {
            secret_hash: r.opt_s(SECRET_HASH)?.map(str::to_owned),
            proven: matches!(item.get(SECRET_PROVEN), Some(AttributeValue::Bool(true))),
        })
    }
}

pub(super) fn device_item(device: &Device) -> Item {
    HashMap::from([
        (DEVICE_ID.to_owned(), s(device.device_id.as_str())),
        (VOIP_TOKEN.to_owned(), s(device.voip_token.expose())),
        (ENVIRONMENT.to_owned(), s(device.environment.as_str())),
        (UPDATED_AT.to_owned(), s(rfc3339_millis(device.updated_at))),
    ])
}

pub(super) fn device_from_item(table: &str, item: &Item) -> Result<Device, StoreError> {
    let r = Reader { table, item };
    Ok(Device {
        device_id: DeviceId::from_stored(r.s(DEVICE_ID)?.to_owned()),
        voip_token: VoipToken::from_stored(r.s(VOIP_TOKEN)?.to_owned()),
        environment: PushEnvironment::from_stored(r.s(ENVIRONMENT)?)
            .ok_or_else(|| bad_item(table, ENVIRONMENT))?,
        updated_at: r.time(UPDATED_AT)?,
    })
}
