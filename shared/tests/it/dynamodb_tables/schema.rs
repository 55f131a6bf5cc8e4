//! The template's tables have the keys, index and TTL the adapter assumes.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{KeyType, ProjectionType, ScalarAttributeType, TimeToLiveStatus};
use koe::store::DUE_INDEX;
use koe_testkit::dynamodb::{client, create_tables, random_prefix};

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
