//! The DynamoDB adapter against DynamoDB Local (testkit starts one per test process), on tables
//! created from template.yaml's own definitions: the tables the code assumes are the ones the
//! template declares, items read back as written, bad items are errors, and the due index is
//! sparse. Here: the store on fresh tables; one file per concern beside it.

mod cancel;
mod corrupted_items;
mod due_index;
mod records;
mod schema;

use aws_sdk_dynamodb::Client;
use chrono::{DateTime, Utc};
use koe::domain::device::DeviceId;
use koe::store::TableNames;
use koe::store::dynamodb::DynamoStore;
use koe_testkit::dynamodb::{client, create_tables, random_prefix};

pub(super) fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

pub(super) fn device_id(s: &str) -> DeviceId {
    DeviceId::parse("deviceId", s).unwrap()
}

pub(super) async fn store() -> (Client, TableNames, DynamoStore) {
    let client = client().await;
    let tables = create_tables(&client, &random_prefix()).await;
    let store = DynamoStore::new(client.clone(), tables.clone());
    (client, tables, store)
}
