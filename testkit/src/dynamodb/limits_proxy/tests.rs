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

#[tokio::test]
async fn one_due_minute_takes_1000_reservations_a_second_and_throttled_ones_are_not_written() {
    let calls = Calls::start(LimitsModel::with_frozen_clock(Limits::default())).await;
    let client = calls.client(RetryConfig::disabled());

    let puts = put_all(&client, &calls.table, devices(2000, |_| MINUTE.to_owned())).await;
    eprintln!(
        "2000 PutItems on one dueShard (frozen clock) in {:?}: {} written, {} throttled; {}",
        puts.took,
        puts.written.len(),
        puts.throttled.len(),
        calls.proxy.stats()
    );
    // Each costs 1 WCU on its own base partition and 1 on the one GSI partition, which holds a
    // second's 1000: the clock stands still, so no refill.
    assert_eq!(puts.written.len(), 1000);
    assert_eq!(puts.throttled.len(), 1000);
    assert_eq!(
        calls.stored().await,
        puts.written,
        "written: present; throttled: absent"
    );
    let stats = calls.proxy.stats();
    assert_eq!(stats.throttled_by_operation["PutItem"], 1000);
    assert_eq!(stats.throttled_by_target[&calls.gsi()], 1000);
    assert_eq!(
        stats.throttled_by_target.get(&Target::base(&calls.table)),
        None
    );
    assert_eq!(stats.consumed[&calls.gsi()].wcu, 1000.0);
    assert_eq!(stats.consumed[&Target::base(&calls.table)].wcu, 1000.0);
    let hottest = stats.hottest_write.unwrap();
    assert_eq!(
        (hottest.target, hottest.key),
        (calls.gsi(), MINUTE.to_owned())
    );
    assert_eq!(hottest.units_per_sec, 1000.0);

    // A tenth of a second refills 100.
    calls.proxy.model().advance(Duration::from_millis(100));
    let again: Vec<(String, String)> = puts
        .throttled
        .iter()
        .take(150)
        .map(|d| (d.clone(), MINUTE.to_owned()))
        .collect();
    let retried = put_all(&client, &calls.table, again).await;
    assert_eq!((retried.written.len(), retried.throttled.len()), (100, 50));
    assert_eq!(calls.stored().await.len(), 1100);
}

/// On the real clock, at a tenth of the real limit (DynamoDB Local takes a few hundred requests
/// a second here, so at 1,000 WCU/s the refill would outrun any burst it can be sent).
#[tokio::test]
async fn on_the_real_clock_a_partition_takes_its_burst_plus_what_refilled_meanwhile() {
    let limits = Limits {
        wcu_per_sec: 100.0,
        ..Limits::default()
    };
    let calls = Calls::start(LimitsModel::new(limits)).await;
    let client = calls.client(RetryConfig::disabled());
    let puts = put_all(&client, &calls.table, devices(300, |_| MINUTE.to_owned())).await;
    let refilled = 100.0 * puts.took.as_secs_f64();
    eprintln!(
        "300 PutItems on one dueShard at 100 WCU/s (real clock) in {:?}: {} written, {} \
         throttled (at most 100 + {refilled:.0} refilled could be); {}",
        puts.took,
        puts.written.len(),
        puts.throttled.len(),
        calls.proxy.stats()
    );
    assert!(
        puts.written.len() >= 100,
        "the first second's 100 always fit"
    );
    assert!(
        puts.written.len() as f64 <= 100.0 + refilled.ceil(),
        "no more than the burst and the refill"
    );
    // Sent faster than burst and refill allow, some must be refused. (On a loaded machine the
    // 300 may take longer than 2 s to send, and then all fit: that is the model being right.)
    if 100.0 + refilled < 300.0 {
        assert!(!puts.throttled.is_empty(), "sent faster than the refill");
    }
    assert_eq!(calls.stored().await, puts.written);
}

#[tokio::test]
async fn the_same_reservations_spread_over_512_due_minutes_are_never_throttled() {
    let calls = Calls::start(LimitsModel::with_frozen_clock(Limits::default())).await;
    let client = calls.client(RetryConfig::disabled());
    let minute = |i: usize| format!("2026-01-01T{:02}:{:02}Z", i % 512 / 60, i % 512 % 60);
    let puts = put_all(&client, &calls.table, devices(2000, minute)).await;
    eprintln!(
        "2000 PutItems over 512 dueShards in {:?}: {}",
        puts.took,
        calls.proxy.stats()
    );
    assert_eq!(puts.written.len(), 2000);
    let stats = calls.proxy.stats();
    assert_eq!(stats.throttled(), 0);
    // 2000 over 512 minutes: at most 4 on one.
    assert_eq!(stats.hottest_write.unwrap().units_per_sec, 4.0);
    assert_eq!(stats.consumed[&calls.gsi()].wcu, 2000.0);
}

#[tokio::test]
async fn a_throttled_update_leaves_the_item_unchanged_and_a_failed_condition_pays_the_base_only() {
    let calls = Calls::start(LimitsModel::with_frozen_clock(Limits::default())).await;
    let client = calls.client(RetryConfig::disabled());
    let model = calls.proxy.model();
    client
        .put_item()
        .table_name(&calls.table)
        .set_item(Some(reservation("d1", MINUTE, 1)))
        .send()
        .await
        .expect("PutItem");
    // Someone else used up the reservation's GSI partition.
    model.debit(&[Charge {
        target: calls.gsi(),
        key: MINUTE.to_owned(),
        capacity: Capacity::Write,
        units: 1000.0,
    }]);

    let claim = |status: &str| {
        client
            .update_item()
            .table_name(&calls.table)
            .key("deviceId", s("d1"))
            .update_expression("SET #status = :status")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":status", s(status))
    };
    // The index carries callerName (INCLUDE): changing it writes the exhausted partition.
    let rename = |name: &str| {
        client
            .update_item()
            .table_name(&calls.table)
            .key("deviceId", s("d1"))
            .update_expression("SET #callerName = :name")
            .expression_attribute_names("#callerName", "callerName")
            .expression_attribute_values(":name", s(name))
    };
    let err = rename("Koe").send().await.unwrap_err();
    let throttle = match err.as_service_error() {
        Some(aws_sdk_dynamodb::operation::update_item::UpdateItemError::ThrottlingException(t)) => {
            t.clone()
        }
        _ => panic!("not a ThrottlingException: {}", DisplayErrorContext(&err)),
    };
    assert!(
        throttle
            .message()
            .unwrap()
            .contains("global secondary indexes")
    );
    let reason: &ThrottlingReason = &throttle.throttling_reasons()[0];
    assert_eq!(
        reason.reason(),
        Some("IndexWriteKeyRangeThroughputExceeded")
    );
    let stored = calls.item("d1").await;
    assert_eq!(
        stored["callerName"].as_s().unwrap(),
        "Mika",
        "the throttled write did not happen"
    );

    // Setting the same value changes no GSI entry: the exhausted GSI partition is not asked.
    rename("Mika")
        .send()
        .await
        .expect("an update the GSI does not see");
    // Nor does a claim: the index does not carry `status` (the dispatcher's hot writes stay
    // off the bucket's partition).
    claim("claimed")
        .send()
        .await
        .expect("a claim the GSI does not see");
    assert_eq!(calls.status("d1").await, "claimed");

    model.advance(Duration::from_secs(2));
    let consumed = |target: &Target| calls.proxy.stats().consumed[target].wcu;
    let base = Target::base(&calls.table);
    let (base_before, gsi_before) = (consumed(&base), consumed(&calls.gsi()));
    let err = claim("claimed")
        .condition_expression("attribute_not_exists(deviceId)")
        .send()
        .await
        .unwrap_err();
    assert!(
        err.as_service_error()
            .unwrap()
            .is_conditional_check_failed_exception()
    );
    assert_eq!(
        consumed(&base),
        base_before + 1.0,
        "a failed condition still pays"
    );
    assert_eq!(
        consumed(&calls.gsi()),
        gsi_before,
        "but on the base table only"
    );

    // Moving the entry to another minute pays the old partition and the new one.
    client
        .update_item()
        .table_name(&calls.table)
        .key("deviceId", s("d1"))
        .update_expression("SET dueShard = :later")
        .expression_attribute_values(":later", s("2026-01-01T23:00Z"))
        .send()
        .await
        .expect("UpdateItem");
    assert_eq!(consumed(&calls.gsi()), gsi_before + 2.0);
}

#[tokio::test]
async fn the_sdk_retries_a_throttle_with_backoff_and_gives_up_after_its_attempts() {
    let calls = Calls::start(LimitsModel::with_frozen_clock(Limits::default())).await;
    let exhaust = |calls: &Calls, device: &str, units: f64| {
        calls.proxy.model().debit(&[Charge {
            target: Target::base(&calls.table),
            key: device.to_owned(),
            capacity: Capacity::Write,
            units,
        }])
    };
    exhaust(&calls, "d1", 1000.0);
    let standard = RetryConfig::standard()
        .with_max_attempts(3)
        .with_initial_backoff(Duration::from_millis(10));
    let err = calls
        .client(standard)
        .put_item()
        .table_name(&calls.table)
        .set_item(Some(reservation("d1", MINUTE, 1)))
        .send()
        .await
        .unwrap_err();
    assert!(err.as_service_error().unwrap().is_throttling_exception());
    assert_eq!(
        calls.proxy.stats().throttled_by_operation["PutItem"],
        3,
        "three attempts"
    );
    assert!(calls.stored().await.is_empty());

    // A retry after the partition refilled gets in: the clock moves once the proxy has
    // throttled the first attempt.
    let calls = Calls::start(LimitsModel::with_frozen_clock(Limits::default())).await;
    exhaust(&calls, "d2", 1000.0);
    let model = calls.proxy.model().clone();
    let refill = tokio::spawn(async move {
        while model.stats().throttled() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        model.advance(Duration::from_secs(1));
    });
    let patient = RetryConfig::standard()
        .with_max_attempts(10)
        .with_initial_backoff(Duration::from_millis(50))
        .with_max_backoff(Duration::from_millis(200));
    calls
        .client(patient)
        .put_item()
        .table_name(&calls.table)
        .set_item(Some(reservation("d2", MINUTE, 1)))
        .send()
        .await
        .expect("written by a retry");
    tokio::time::timeout(Duration::from_secs(10), refill)
        .await
        .expect("the first attempt was throttled")
        .unwrap();
    let throttled = calls.proxy.stats().throttled_by_operation["PutItem"];
    assert!(
        (1..10).contains(&throttled),
        "{throttled} attempts throttled"
    );
    assert_eq!(calls.stored().await, BTreeSet::from(["d2".to_owned()]));
}

#[tokio::test]
async fn reads_pay_by_size_and_a_query_pays_for_what_its_filter_dropped() {
    let calls = Calls::start(LimitsModel::with_frozen_clock(Limits::default())).await;
    let client = calls.client(RetryConfig::disabled());
    // 40 reservations of ~2.2 KB in the index (a long caller name, which it carries) on one
    // minute, 30 of them another caller: ~88 KB evaluated.
    for i in 0..40 {
        let mut item = reservation(&format!("q{i}"), MINUTE, i);
        let caller = if i < 10 { "a" } else { "b" };
        item.insert("callerName".to_owned(), s(&caller.repeat(2100)));
        item.insert("note".to_owned(), s("not in the index"));
        client
            .put_item()
            .table_name(&calls.table)
            .set_item(Some(item))
            .send()
            .await
            .expect("PutItem");
    }
    let out = client
        .query()
        .table_name(&calls.table)
        .index_name(DUE_INDEX)
        .key_condition_expression("#dueShard = :minute")
        .filter_expression("#callerName = :a")
        .expression_attribute_names("#dueShard", "dueShard")
        .expression_attribute_names("#callerName", "callerName")
        .expression_attribute_values(":minute", s(MINUTE))
        .expression_attribute_values(":a", s(&"a".repeat(2100)))
        .send()
        .await
        .expect("Query");
    assert_eq!((out.count(), out.scanned_count()), (10, 40));
    let rcu = calls.proxy.stats().consumed[&calls.gsi()].rcu;
    // 40 items of 2,2xx bytes: 22 units of 4 KB, halved (eventually consistent).
    assert_eq!(rcu, 11.0, "all 40 evaluated items, not the 10 returned");

    client
        .get_item()
        .table_name(&calls.table)
        .key("deviceId", s("q0"))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem");
    let base = Target::base(&calls.table);
    assert_eq!(calls.proxy.stats().consumed[&base].rcu, 1.0);

    // A partition in read debt throttles the next read before it is sent.
    calls.proxy.model().debit(&[Charge {
        target: base.clone(),
        key: "q0".to_owned(),
        capacity: Capacity::Read,
        units: 3000.0,
    }]);
    let err = client
        .get_item()
        .table_name(&calls.table)
        .key("deviceId", s("q0"))
        .send()
        .await
        .unwrap_err();
    assert!(err.as_service_error().unwrap().is_throttling_exception());
    assert_eq!(calls.proxy.stats().throttled_by_operation["GetItem"], 1);
}
