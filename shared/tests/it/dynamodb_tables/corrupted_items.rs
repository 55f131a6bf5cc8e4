//! Corrupted items are store errors, not panics.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use koe::store::CancelError;
use koe::store::prelude::*;

use super::{at, device_id, store};
use crate::store_contract::missed_before;

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
        store
            .cancel_reservation(&id, None, now, missed_before(now))
            .await,
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
