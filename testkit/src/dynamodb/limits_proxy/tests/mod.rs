//! The limits proxy on DynamoDB Local, through the real SDK, on `template.yaml`'s `CallsTable`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::{AttributeValue, ThrottlingReason};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::LimitsProxy;
use crate::dynamodb::limits::{Capacity, Charge, Limits, LimitsModel, TableDef, Target};
use crate::dynamodb::{
    CALLS_TABLE, client, config_builder, create_tables, endpoint, random_prefix,
};

const DUE_INDEX: &str = "byDueShard";
const MINUTE: &str = "2026-01-01T22:00Z";
/// Requests in flight at once.
const IN_FLIGHT: usize = 32;

struct Calls {
    proxy: LimitsProxy,
    /// Straight to DynamoDB Local, uncharged: to see what was written.
    direct: Client,
    table: String,
}

impl Calls {
    async fn start(model: LimitsModel) -> Calls {
        let direct = client().await;
        let table = create_tables(&direct, &random_prefix()).await.calls;
        let def = TableDef::from_template(CALLS_TABLE, &table);
        assert_eq!(def.gsi(DUE_INDEX).unwrap().hash_key, "dueShard");
        let proxy = LimitsProxy::with_model(&endpoint(), &[def], Arc::new(model)).await;
        Calls {
            proxy,
            direct,
            table,
        }
    }

    fn client(&self, retry: RetryConfig) -> Client {
        Client::from_conf(
            config_builder(&self.proxy.url())
                .retry_config(retry)
                .build(),
        )
    }

    fn gsi(&self) -> Target {
        Target::index(&self.table, DUE_INDEX)
    }

    /// Every device id stored in DynamoDB Local.
    async fn stored(&self) -> BTreeSet<String> {
        let mut devices = BTreeSet::new();
        let mut start = None;
        loop {
            let page = self
                .direct
                .scan()
                .table_name(&self.table)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .expect("Scan");
            for item in page.items() {
                devices.insert(item["deviceId"].as_s().unwrap().clone());
            }
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => return devices,
            }
        }
    }

    async fn item(&self, device: &str) -> HashMap<String, AttributeValue> {
        let item = self
            .direct
            .get_item()
            .table_name(&self.table)
            .key("deviceId", s(device))
            .consistent_read(true)
            .send()
            .await
            .expect("GetItem");
        item.item().unwrap().clone()
    }

    async fn status(&self, device: &str) -> String {
        self.item(device).await["status"].as_s().unwrap().clone()
    }
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

fn reservation(device: &str, minute: &str, at_ms: usize) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("deviceId".to_owned(), s(device)),
        ("status".to_owned(), s("scheduled")),
        ("dueShard".to_owned(), s(minute)),
        (
            "scheduledAtMs".to_owned(),
            AttributeValue::N(at_ms.to_string()),
        ),
        ("voipToken".to_owned(), s(&"ab".repeat(32))),
        ("callerName".to_owned(), s("Mika")),
    ])
}

/// What a run of PutItems came to.
struct Puts {
    written: BTreeSet<String>,
    throttled: BTreeSet<String>,
    took: Duration,
}

/// Puts the reservations of `devices` (device id, minute) through `client`, `IN_FLIGHT` at a
/// time, with no retries: each one written or throttled (anything else fails the test).
async fn put_all(client: &Client, table: &str, devices: Vec<(String, String)>) -> Puts {
    let started = Instant::now();
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut puts = JoinSet::new();
    for (i, (device, minute)) in devices.into_iter().enumerate() {
        let request = client
            .put_item()
            .table_name(table)
            .set_item(Some(reservation(&device, &minute, 1_000_000 + i)));
        let permit = permits.clone().acquire_owned().await.unwrap();
        puts.spawn(async move {
            let result = request.send().await;
            drop(permit);
            match result {
                Ok(_) => (device, true),
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|e| e.is_throttling_exception()) =>
                {
                    (device, false)
                }
                Err(e) => panic!("PutItem {device}: {}", DisplayErrorContext(&e)),
            }
        });
    }
    let mut outcome = Puts {
        written: BTreeSet::new(),
        throttled: BTreeSet::new(),
        took: Duration::ZERO,
    };
    while let Some(done) = puts.join_next().await {
        let (device, written) = done.unwrap();
        match written {
            true => outcome.written.insert(device),
            false => outcome.throttled.insert(device),
        };
    }
    outcome.took = started.elapsed();
    outcome
}

fn devices(count: usize, minute: impl Fn(usize) -> String) -> Vec<(String, String)> {
    (0..count)
        .map(|i| (format!("d{i:05}"), minute(i)))
        .collect()
}

mod partitions;
mod requests;
mod tables;
