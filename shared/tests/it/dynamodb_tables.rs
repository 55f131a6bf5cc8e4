//! The DynamoDB adapter against DynamoDB Local (testkit starts one per test process), on tables
//! created from template.yaml's own definitions: the tables the code assumes are the ones the
//! template declares, items read back as written, bad items are errors, and the due index is
//! sparse.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeyType, ProjectionType, ScalarAttributeType, TimeToLiveStatus,
};
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use koe::domain::device::{Device, DeviceId, PushEnvironment, VoipToken};
use koe::domain::reservation::{Reservation, ReservationStatus, RunToken, ScheduledAt};
use koe::store::dynamodb::DynamoStore;
use koe::store::prelude::*;
use koe::store::{CancelError, DUE_INDEX, Outcome, TableNames};
use koe_testkit::dynamodb::{client, create_tables, random_prefix};

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn device_id(s: &str) -> DeviceId {
    DeviceId::parse("deviceId", s).unwrap()
}

async fn store() -> (Client, TableNames, DynamoStore) {
    let client = client().await;
    let tables = create_tables(&client, &random_prefix()).await;
    let store = DynamoStore::new(client.clone(), tables.clone());
    (client, tables, store)
}

/// (attribute, key type) pairs of a key schema.
fn keys(schema: &[aws_sdk_dynamodb::types::KeySchemaElement]) -> Vec<(String, KeyType)> {
    schema
        .iter()
        .map(|k| (k.attribute_name().to_owned(), k.key_type().clone()))
        .collect()
}

async fn ttl_attribute(client: &Client, table: &str) -> Option<String> {
    let ttl = client
        .describe_time_to_live()
        .table_name(table)
        .send()
        .await
        .unwrap();
    let description = ttl.time_to_live_description()?;
    (description.time_to_live_status() == Some(&TimeToLiveStatus::Enabled))
        .then(|| description.attribute_name().unwrap().to_owned())
}

#[tokio::test]
async fn the_template_tables_have_the_keys_index_and_ttl_the_adapter_assumes() {
    let client = client().await;
    let tables = create_tables(&client, &random_prefix()).await;

    let describe = |name: String| {
        let client = client.clone();
        async move {
            client
                .describe_table()
                .table_name(name)
                .send()
                .await
                .unwrap()
                .table
                .unwrap()
        }
    };
    let hash = |name: &str| (name.to_owned(), KeyType::Hash);
    let range = |name: &str| (name.to_owned(), KeyType::Range);

    let devices = describe(tables.devices.clone()).await;
    assert_eq!(keys(devices.key_schema()), vec![hash("deviceId")]);
    assert!(devices.global_secondary_indexes().is_empty());
    assert_eq!(
        ttl_attribute(&client, &tables.devices).await.as_deref(),
        Some("expireAt")
    );

    let calls = describe(tables.calls.clone()).await;
    assert_eq!(keys(calls.key_schema()), vec![hash("deviceId")]);
    let [gsi] = calls.global_secondary_indexes() else {
        panic!("the calls table has exactly one GSI");
    };
    assert_eq!(gsi.index_name(), Some(DUE_INDEX));
    assert_eq!(
        keys(gsi.key_schema()),
        vec![hash("dueShard"), range("scheduledAtMs")]
    );
    assert_eq!(
        gsi.projection().and_then(|p| p.projection_type()),
        Some(&ProjectionType::Include),
        "claims and push marks must not write the index"
    );
    let mut carried: Vec<&str> = gsi
        .projection()
        .map(|p| p.non_key_attributes().iter().map(String::as_str).collect())
        .unwrap_or_default();
    carried.sort_unstable();
    assert_eq!(carried, ["callId", "callerName", "scheduledAt"]);
    let types: HashMap<&str, &ScalarAttributeType> = calls
        .attribute_definitions()
        .iter()
        .map(|d| (d.attribute_name(), d.attribute_type()))
        .collect();
    assert_eq!(types["deviceId"], &ScalarAttributeType::S);
    assert_eq!(types["dueShard"], &ScalarAttributeType::S);
    assert_eq!(types["scheduledAtMs"], &ScalarAttributeType::N);
    assert_eq!(
        ttl_attribute(&client, &tables.calls).await.as_deref(),
        Some("expireAt")
    );

    let usage = describe(tables.usage.clone()).await;
    assert_eq!(
        keys(usage.key_schema()),
        vec![hash("deviceId"), range("day")]
    );
    assert!(usage.global_secondary_indexes().is_empty());
    assert_eq!(
        ttl_attribute(&client, &tables.usage).await.as_deref(),
        Some("expireAt")
    );
}

#[tokio::test]
async fn records_read_back_exactly_as_written() {
    let (_client, _tables, store) = store().await;
    let now = at("2026-01-01T00:00:00.123Z");

    let device = Device {
        device_id: device_id("6F9619FF-8B86-D011-B42D-00C04FC964FF"),
        voip_token: VoipToken::parse("voipToken", &"ab".repeat(40)).unwrap(),
        environment: PushEnvironment::Sandbox,
        updated_at: now,
        confirms_calls: false,
    };
    store.put_device(&device).await.unwrap();
    assert_eq!(
        store
            .get_device(&device.device_id, chrono::Utc::now())
            .await
            .unwrap(),
        Some(device.clone())
    );

    let scheduled_at =
        ScheduledAt::parse("scheduledAt", "2026-01-01T09:30:15.250+09:00", now).unwrap();
    let mut reservation = Reservation::new(
        device.device_id.clone(),
        scheduled_at,
        Some("こえ 🌙 さくら「おはよう」".to_owned()),
        now,
    );
    store
        .create_reservation(&reservation, now, now - Duration::minutes(2))
        .await
        .unwrap();
    let read = store
        .get_reservation(&device.device_id, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read, reservation);
    // DateTime equality ignores the offset: the client's own text must survive too.
    assert_eq!(
        read.scheduled_at
            .with_offset()
            .to_rfc3339_opts(SecondsFormat::AutoSi, true),
        "2026-01-01T09:30:15.250+09:00"
    );

    let claimed_at = at("2026-01-01T00:30:15.001Z");
    let run = RunToken::generate();
    assert!(
        store
            .claim_reservation(
                &device.device_id,
                &reservation.call_id,
                &run,
                claimed_at,
                claimed_at - Duration::seconds(60),
            )
            .await
            .unwrap()
    );
    reservation.status = ReservationStatus::Claimed;
    reservation.claimed_at = Some(claimed_at);
    reservation.claimed_by = Some(run.clone());
    reservation.updated_at = claimed_at;
    let read = store.get_reservation(&device.device_id, claimed_at).await;
    assert_eq!(read.unwrap(), Some(reservation.clone()));

    let done = claimed_at + Duration::milliseconds(400);
    assert!(
        store
            .finish_reservation(
                &device.device_id,
                &reservation.call_id,
                Outcome::Sent,
                &run,
                done,
                done - Duration::seconds(60),
            )
            .await
            .unwrap()
    );
    reservation.status = ReservationStatus::Sent;
    reservation.pushes = 1;
    reservation.finished_by = Some(run);
    reservation.updated_at = done;
    reservation.expire_at = Some((done + Duration::days(7)).timestamp());
    let read = store.get_reservation(&device.device_id, done).await;
    assert_eq!(read.unwrap(), Some(reservation));
}

/// A device's record expires 400 days after its last registration, renewed by every one, and
/// keeps it (and its secret) when APNs's verdict removes the token.
#[tokio::test]
async fn a_device_expires_400_days_after_its_last_registration() {
    let (client, tables, store) = store().await;
    let expire_at = |id: &DeviceId| {
        let (client, table, id) = (client.clone(), tables.devices.clone(), id.clone());
        async move {
            let item = client
                .get_item()
                .table_name(table)
                .key("deviceId", AttributeValue::S(id.as_str().to_owned()))
                .consistent_read(true)
                .send()
                .await
                .unwrap()
                .item
                .expect("the device's item");
            item["expireAt"].as_n().unwrap().parse::<i64>().unwrap()
        }
    };
    let id = device_id("d-ttl");
    let first = at("2026-01-01T00:00:00Z");
    let device = |updated_at| Device {
        device_id: id.clone(),
        voip_token: VoipToken::parse("voipToken", &"cd".repeat(40)).unwrap(),
        environment: PushEnvironment::Production,
        updated_at,
        confirms_calls: false,
    };
    store
        .register_device(&device(first), None, "h1")
        .await
        .unwrap();
    assert_eq!(
        expire_at(&id).await,
        (first + Duration::days(400)).timestamp()
    );
    let later = first + Duration::days(100);
    store
        .register_device(&device(later), None, "h2")
        .await
        .unwrap();
    assert_eq!(
        expire_at(&id).await,
        (later + Duration::days(400)).timestamp(),
        "renewed"
    );
    assert!(
        store
            .remove_device(&id, &device(later).voip_token)
            .await
            .unwrap()
    );
    assert_eq!(
        expire_at(&id).await,
        (later + Duration::days(400)).timestamp(),
        "kept with the secret"
    );
}

#[tokio::test]
async fn cancel_tells_missing_and_expired_from_too_late() {
    let (_client, _tables, store) = store().await;
    let now = at("2026-01-01T00:00:00Z");
    let id = device_id("d-cancel");
    let stale_before = now - Duration::minutes(2);
    assert_eq!(
        store.cancel_reservation(&id, None, now).await,
        Err(CancelError::NotFound)
    );

    let at_time = ScheduledAt::parse("scheduledAt", "2026-01-01T00:01:00Z", now).unwrap();
    let r = Reservation::new(id.clone(), at_time, None, now);
    store
        .create_reservation(&r, now, stale_before)
        .await
        .unwrap();
    store.cancel_reservation(&id, None, now).await.unwrap();
    assert_eq!(store.get_reservation(&id, now).await.unwrap(), None);

    let r = Reservation::new(id.clone(), at_time, None, now);
    store
        .create_reservation(&r, now, stale_before)
        .await
        .unwrap();
    let claim_at = at("2026-01-01T00:01:00Z");
    let abandoned = claim_at - Duration::seconds(60);
    assert!(
        store
            .claim_reservation(&id, &r.call_id, &RunToken::generate(), claim_at, abandoned)
            .await
            .unwrap()
    );
    assert_eq!(
        store.cancel_reservation(&id, None, claim_at).await,
        Err(CancelError::TooLate(ReservationStatus::Claimed))
    );
    assert!(
        store
            .finish_reservation(
                &id,
                &r.call_id,
                Outcome::Failed,
                &RunToken::generate(),
                claim_at,
                abandoned,
            )
            .await
            .unwrap()
    );
    assert_eq!(
        store.cancel_reservation(&id, None, claim_at).await,
        Err(CancelError::TooLate(ReservationStatus::Failed))
    );
    // Past its TTL the record counts as gone, even though DynamoDB has not deleted it yet.
    let later = claim_at + Duration::days(7);
    assert_eq!(
        store.cancel_reservation(&id, None, later).await,
        Err(CancelError::NotFound)
    );
    assert_eq!(store.get_reservation(&id, later).await.unwrap(), None);
}

fn valid_call_item(device: &str) -> HashMap<String, AttributeValue> {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    HashMap::from([
        ("deviceId".to_owned(), s(device)),
        ("callId".to_owned(), s("c0ffee")),
        ("scheduledAt".to_owned(), s("2026-01-01T09:00:00+09:00")),
        (
            "scheduledAtMs".to_owned(),
            AttributeValue::N(at("2026-01-01T00:00:00Z").timestamp_millis().to_string()),
        ),
        ("dueShard".to_owned(), s("2026-01-01T00:00Z#0")),
        ("status".to_owned(), s("scheduled")),
        ("createdAt".to_owned(), s("2025-12-31T23:00:00.000Z")),
        ("updatedAt".to_owned(), s("2025-12-31T23:00:00.000Z")),
    ])
}

#[tokio::test]
async fn corrupted_items_are_store_errors_not_panics() {
    let (client, tables, store) = store().await;
    let now = at("2025-12-31T23:30:00Z");
    let put = |table: String, item: HashMap<String, AttributeValue>| {
        let client = client.clone();
        async move {
            client
                .put_item()
                .table_name(table)
                .set_item(Some(item))
                .send()
                .await
                .unwrap();
        }
    };

    // An unknown status.
    let mut item = valid_call_item("d-bad-status");
    item.insert("status".into(), AttributeValue::S("exploded".into()));
    put(tables.calls.clone(), item).await;
    let id = device_id("d-bad-status");
    let err = store.get_reservation(&id, now).await.unwrap_err();
    assert!(err.message.contains("status"), "{err}");
    assert!(
        !err.message.contains("exploded"),
        "no item contents in errors: {err}"
    );
    assert!(matches!(
        store.cancel_reservation(&id, None, now).await,
        Err(CancelError::Store(_))
    ));

    // A due reservation that lost an attribute fails the bucket query, not the process.
    let mut item = valid_call_item("d-no-created");
    item.remove("scheduledAt");
    put(tables.calls.clone(), item).await;
    let err = store.due_calls("2026-01-01T00:00Z", 0).await.unwrap_err();
    assert!(err.message.contains("scheduledAt"), "{err}");

    // A number where a string belongs, and a bad environment.
    let mut item = valid_call_item("d-wrong-type");
    item.insert("callId".into(), AttributeValue::N("7".into()));
    item.remove("dueShard");
    put(tables.calls.clone(), item).await;
    let err = store.get_reservation(&device_id("d-wrong-type"), now).await;
    assert!(err.unwrap_err().message.contains("callId"));

    let token = "cd".repeat(32);
    put(
        tables.devices.clone(),
        HashMap::from([
            ("deviceId".to_owned(), AttributeValue::S("d-env".into())),
            ("voipToken".to_owned(), AttributeValue::S(token.clone())),
            (
                "environment".to_owned(),
                AttributeValue::S("staging".into()),
            ),
            (
                "updatedAt".to_owned(),
                AttributeValue::S("2026-01-01T00:00:00.000Z".into()),
            ),
        ]),
    )
    .await;
    let err = store
        .get_device(&device_id("d-env"), chrono::Utc::now())
        .await
        .unwrap_err();
    assert!(err.message.contains("environment"), "{err}");
    assert!(
        !err.message.contains(&token),
        "tokens never reach error messages"
    );
}

/// Index entries in `minute`'s one shard (the tests here make few enough for one).
async fn index_count(client: &Client, tables: &TableNames, minute: &str) -> i32 {
    client
        .query()
        .table_name(&tables.calls)
        .index_name(DUE_INDEX)
        .key_condition_expression("#m = :m")
        .expression_attribute_names("#m", "dueShard")
        .expression_attribute_values(":m", AttributeValue::S(format!("{minute}#0")))
        .send()
        .await
        .unwrap()
        .count()
}

#[tokio::test]
async fn finished_reservations_leave_the_due_index() {
    let (client, tables, store) = store().await;
    let now = at("2026-01-01T00:00:00Z");
    let minute = "2026-01-01T00:05Z";
    let stale_before = now - Duration::minutes(2);

    let mut calls = Vec::new();
    for (device, time) in [
        ("d-late", "2026-01-01T09:05:40+09:00"),
        ("d-early", "2026-01-01T00:05:01Z"),
        ("d-mid", "2026-01-01T00:05:20.5Z"),
    ] {
        let at_time = ScheduledAt::parse("scheduledAt", time, now).unwrap();
        let r = Reservation::new(device_id(device), at_time, None, now);
        store
            .create_reservation(&r, now, stale_before)
            .await
            .unwrap();
        calls.push(r);
    }
    assert_eq!(store.due_count(minute).await.unwrap(), 3);
    let due: Vec<String> = store
        .due_calls(minute, 0)
        .await
        .unwrap()
        .iter()
        .map(|r| r.device_id.as_str().to_owned())
        .collect();
    assert_eq!(due, ["d-early", "d-mid", "d-late"], "in time order");
    assert_eq!(index_count(&client, &tables, minute).await, 3);

    let send_at = at("2026-01-01T00:05:01Z");
    let abandoned = send_at - Duration::seconds(60);
    let early = &calls[1];
    assert!(
        store
            .claim_reservation(
                &early.device_id,
                &early.call_id,
                &RunToken::generate(),
                send_at,
                abandoned,
            )
            .await
            .unwrap()
    );
    assert_eq!(store.due_calls(minute, 0).await.unwrap().len(), 3);
    for (r, outcome) in [(&calls[1], Outcome::Sent), (&calls[0], Outcome::Missed)] {
        assert!(
            store
                .finish_reservation(
                    &r.device_id,
                    &r.call_id,
                    outcome,
                    &RunToken::generate(),
                    send_at,
                    abandoned,
                )
                .await
                .unwrap()
        );
    }
    let due = store.due_calls(minute, 0).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].device_id.as_str(), "d-mid");
    // Not filtered out: gone from the index itself.
    assert_eq!(index_count(&client, &tables, minute).await, 1);

    let mid = &calls[2];
    assert!(
        store
            .claim_reservation(
                &mid.device_id,
                &mid.call_id,
                &RunToken::generate(),
                send_at,
                abandoned,
            )
            .await
            .unwrap()
    );
    assert!(
        store
            .finish_reservation(
                &mid.device_id,
                &mid.call_id,
                Outcome::Failed,
                &RunToken::generate(),
                send_at,
                abandoned
            )
            .await
            .unwrap()
    );
    assert!(store.due_calls(minute, 0).await.unwrap().is_empty());
    assert_eq!(index_count(&client, &tables, minute).await, 0);
}
