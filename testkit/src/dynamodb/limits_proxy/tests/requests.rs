//! Single requests under the limits: a throttled update, the SDK's retries, reads by size.

use aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder;

use super::*;

/// A `PutItem` of `item` into the calls table.
fn put(
    client: &Client,
    calls: &Calls,
    item: HashMap<String, AttributeValue>,
) -> PutItemFluentBuilder {
    client
        .put_item()
        .table_name(&calls.table)
        .set_item(Some(item))
}

#[tokio::test]
async fn a_throttled_update_leaves_the_item_unchanged_and_a_failed_condition_pays_the_base_only() {
    let calls = Calls::start(LimitsModel::with_frozen_clock(Limits::default())).await;
    let client = calls.client(RetryConfig::disabled());
    let model = calls.proxy.model();
    put(&client, &calls, reservation("d1", MINUTE, 1))
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

    // `SET attribute = value` on d1.
    let set = |attribute: &str, value: &str| {
        client
            .update_item()
            .table_name(&calls.table)
            .key("deviceId", s("d1"))
            .update_expression("SET #a = :v")
            .expression_attribute_names("#a", attribute)
            .expression_attribute_values(":v", s(value))
    };
    let claim = |status: &str| set("status", status);
    // The index carries callerName (INCLUDE): changing it writes the exhausted partition.
    let rename = |name: &str| set("callerName", name);
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
    set("dueShard", "2026-01-01T23:00Z")
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
    let err = put(
        &calls.client(standard),
        &calls,
        reservation("d1", MINUTE, 1),
    )
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
    put(&calls.client(patient), &calls, reservation("d2", MINUTE, 1))
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
        put(&client, &calls, item).send().await.expect("PutItem");
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

/// A transaction (the cancel: the reservation's update and the tombstone's put) pays 2 WCU per
/// item on the base table, index entries as usual; cancelled on its condition, it keeps its
/// base charge.
#[tokio::test]
async fn a_transaction_pays_two_units_per_item() {
    use aws_sdk_dynamodb::types::{Put, TransactWriteItem, Update};

    let calls = Calls::start(LimitsModel::with_frozen_clock(Limits::default())).await;
    let client = calls.client(RetryConfig::disabled());
    put(&client, &calls, reservation("d1", MINUTE, 1))
        .send()
        .await
        .expect("PutItem");
    let consumed = |target: &Target| calls.proxy.stats().consumed[target].wcu;
    let base = Target::base(&calls.table);
    let (base_before, gsi_before) = (consumed(&base), consumed(&calls.gsi()));
    let cancel = |condition: &str| {
        let update = Update::builder()
            .table_name(&calls.table)
            .key("deviceId", s("d1"))
            .update_expression("SET #s = :c REMOVE #d")
            .condition_expression(condition)
            .expression_attribute_names("#s", "status")
            .expression_attribute_names("#d", "dueShard")
            .expression_attribute_values(":c", s("cancelled"))
            .build()
            .unwrap();
        let tombstone = Put::builder()
            .table_name(&calls.table)
            .item("deviceId", s("cancelled#c1"))
            .build()
            .unwrap();
        client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().update(update).build())
            .transact_items(TransactWriteItem::builder().put(tombstone).build())
    };
    cancel("attribute_exists(#s)")
        .send()
        .await
        .expect("TransactWriteItems");
    assert_eq!(consumed(&base), base_before + 4.0, "2 items, 2 WCU each");
    assert_eq!(
        consumed(&calls.gsi()),
        gsi_before + 1.0,
        "the entry removed"
    );
    let err = cancel("attribute_not_exists(#s)").send().await.unwrap_err();
    assert!(
        format!("{}", DisplayErrorContext(&err)).contains("TransactionCanceled"),
        "{}",
        DisplayErrorContext(&err)
    );
    assert_eq!(
        consumed(&base),
        base_before + 8.0,
        "a cancelled one still pays"
    );
    assert_eq!(consumed(&calls.gsi()), gsi_before + 1.0);
}
