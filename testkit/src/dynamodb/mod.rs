//! DynamoDB Local for tests: a client, and tables created from `template.yaml`'s own
//! `AWS::DynamoDB::Table` definitions (key schema, attribute definitions, GSIs, billing mode,
//! TTL), so the tests exercise exactly the tables that get deployed. Nothing about the schema is
//! written here.
//!
//! The tests start DynamoDB Local themselves ([`DynamoDbLocal`], in `dynamodb/local/`): each
//! test process starts one shared in-memory instance on first use ([`endpoint`], [`client`],
//! [`fresh_store`]) and it dies with the process; tests of an outage start instances of their
//! own ([`DynamoDbLocal::on_disk`]) and stop and start them. `KOE_TEST_DYNAMODB_ENDPOINT`, if
//! set, names a DynamoDB Local that is already running, used instead of the shared one. Every
//! store gets its own randomly prefixed tables, so tests run in parallel against one instance.
//!
//! Needs `java` on PATH and the emulator fetched (`scripts/dynamodb-local.sh fetch`); the panic
//! says how to get either when it is missing.

mod front;
pub mod held_replies;
pub mod limited_store;
pub mod limits;
pub mod limits_proxy;
mod local;
pub mod reply_drop;

use std::sync::OnceLock;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, TimeToLiveSpecification,
};
use koe::store::TableNames;
use koe::store::dynamodb::DynamoStore;
use serde_norway::Value;

pub use self::local::{CACHE_VAR, DIR_VAR, DynamoDbLocal, StartError, Storage, emulator_dir};
use crate::template::load_yaml;

/// A DynamoDB Local already running (e.g. `http://127.0.0.1:8000`), used instead of starting one.
pub const ENDPOINT_VAR: &str = "KOE_TEST_DYNAMODB_ENDPOINT";
/// DynamoDB Local scopes tables per access key and region: every test client uses these.
pub const REGION: &str = "ap-northeast-1";
/// Letters and digits only: DynamoDB Local rejects other access key ids
/// (`UnrecognizedClientException`), e.g. "koe-test".
pub const ACCESS_KEY: &str = "koetest";

/// The template's logical ids of the three tables.
pub const DEVICES_TABLE: &str = "DevicesTable";
pub const CALLS_TABLE: &str = "CallsTable";
pub const USAGE_TABLE: &str = "AgentUsageTable";

/// Table properties that do not change the schema the adapter sees (ignored here).
const IGNORED_PROPERTIES: &[&str] = &[
    "TableName",
    "SSESpecification",
    "PointInTimeRecoverySpecification",
    "DeletionProtectionEnabled",
    "ContributorInsightsSpecification",
    "Tags",
    "TableClass",
    // Capacity ahead of a peak: DynamoDB Local serves whatever it is sent.
    "WarmThroughput",
];

/// The endpoint of this process's DynamoDB Local: `KOE_TEST_DYNAMODB_ENDPOINT` if set, else the
/// shared in-memory instance, started on first use (blocking: a few seconds, once per process;
/// [`client`] does that off the async runtime). Panics with what to do if it cannot start (the
/// same message for every caller).
pub fn endpoint() -> String {
    if let Some(url) = endpoint_from_env() {
        return url;
    }
    shared().endpoint.clone()
}

fn endpoint_from_env() -> Option<String> {
    std::env::var(ENDPOINT_VAR)
        .ok()
        .map(|url| url.trim().to_owned())
        .filter(|url| !url.is_empty())
}

/// The shared in-memory instance of this process, started on first use. It is never dropped
/// (a `static`): it dies when the process ends (see `DynamoDbLocal`). A failed start is kept,
/// so every test fails at once with its message instead of each trying again.
fn shared() -> &'static DynamoDbLocal {
    static SHARED: OnceLock<Result<DynamoDbLocal, StartError>> = OnceLock::new();
    match SHARED.get_or_init(|| DynamoDbLocal::spawn(Storage::InMemory)) {
        Ok(instance) => instance,
        Err(e) => panic!("{e}"),
    }
}

/// A client for DynamoDB Local with fixed dummy credentials and region (nothing from the
/// environment but the endpoint). One per test: a client is tied to its test's runtime.
pub async fn client() -> Client {
    let endpoint = match endpoint_from_env() {
        Some(url) => url,
        None => local::blocking(endpoint).await,
    };
    Client::from_conf(config_builder(&endpoint).build())
}

/// A client for the DynamoDB Local at `endpoint` configured as the deployed functions' is
/// (`DynamoStore::timeouts`, the SDK's standard retries), for tests of what an outage does.
pub fn production_like_client(endpoint: &str) -> Client {
    Client::from_conf(
        config_builder(endpoint)
            .timeout_config(DynamoStore::timeouts())
            .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::standard())
            .build(),
    )
}

/// [`config_builder`] with `events/env.json`'s region and credentials (its `Parameters`), as the
/// local server and the deployed functions' stand-ins use them: DynamoDB Local keeps tables
/// apart per access key and region.
pub fn env_json_config_builder(endpoint: &str) -> aws_sdk_dynamodb::config::Builder {
    let env_json = crate::fixtures::env_json();
    let params = &env_json["Parameters"];
    config_builder(endpoint)
        .region(Region::new(params["AWS_REGION"].clone()))
        .credentials_provider(Credentials::new(
            &params["AWS_ACCESS_KEY_ID"],
            &params["AWS_SECRET_ACCESS_KEY"],
            None,
            None,
            "events/env.json",
        ))
}

/// The client configuration every testkit client starts from: the endpoint, fixed dummy
/// credentials and region.
pub fn config_builder(endpoint: &str) -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .http_client(koe::platform::aws_http::sdk_http_client())
        .region(Region::new(REGION))
        .credentials_provider(Credentials::new(
            ACCESS_KEY,
            ACCESS_KEY,
            None,
            None,
            "koe-testkit",
        ))
        .endpoint_url(endpoint)
}

/// One `AWS::DynamoDB::Table` of `template.yaml`, as CreateTable/UpdateTimeToLive input.
#[derive(Debug, Clone)]
pub struct TableDefinition {
    pub logical_id: String,
    pub attribute_definitions: Vec<AttributeDefinition>,
    pub key_schema: Vec<KeySchemaElement>,
    pub global_secondary_indexes: Vec<GlobalSecondaryIndex>,
    pub billing_mode: Option<BillingMode>,
    /// `TimeToLiveSpecification.AttributeName` when `Enabled: true`.
    pub ttl_attribute: Option<String>,
}

/// The value under a CloudFormation short-form tag (`!Sub x` → `x`), or the value itself.
fn untag(value: &Value) -> &Value {
    match value {
        Value::Tagged(tagged) => untag(&tagged.value),
        other => other,
    }
}

fn field<'a>(value: &'a Value, key: &str, context: &str) -> &'a Value {
    untag(value)
        .get(key)
        .map(untag)
        .unwrap_or_else(|| panic!("template.yaml: {context} has no {key}"))
}

fn str_field(value: &Value, key: &str, context: &str) -> String {
    field(value, key, context)
        .as_str()
        .unwrap_or_else(|| panic!("template.yaml: {context}.{key} is not a string"))
        .to_owned()
}

fn list<'a>(value: &'a Value, key: &str, context: &str) -> &'a [Value] {
    field(value, key, context)
        .as_sequence()
        .unwrap_or_else(|| panic!("template.yaml: {context}.{key} is not a list"))
}

/// The list under `key` of `{AttributeName, <kind>}` entries (a key schema, attribute
/// definitions), each built by `build` from its name and its `kind` field.
fn named_entries<T, E: std::fmt::Display>(
    value: &Value,
    key: &str,
    kind: &str,
    context: &str,
    build: impl Fn(String, &str) -> Result<T, E>,
) -> Vec<T> {
    list(value, key, context)
        .iter()
        .map(|entry| {
            let name = str_field(entry, "AttributeName", context);
            build(name, &str_field(entry, kind, context))
                .unwrap_or_else(|e| panic!("template.yaml: {context}.{key}: {e}"))
        })
        .collect()
}

fn key_schema(value: &Value, context: &str) -> Vec<KeySchemaElement> {
    named_entries(value, "KeySchema", "KeyType", context, |name, kind| {
        let builder = KeySchemaElement::builder().attribute_name(name);
        builder.key_type(KeyType::from(kind)).build()
    })
}

fn attribute_definitions(value: &Value, context: &str) -> Vec<AttributeDefinition> {
    named_entries(
        value,
        "AttributeDefinitions",
        "AttributeType",
        context,
        |name, kind| {
            let builder = AttributeDefinition::builder().attribute_name(name);
            builder
                .attribute_type(ScalarAttributeType::from(kind))
                .build()
        },
    )
}

fn projection(value: &Value, context: &str) -> Projection {
    let projection = field(value, "Projection", context);
    let non_key: Option<Vec<String>> = untag(projection)
        .get("NonKeyAttributes")
        .and_then(|v| untag(v).as_sequence())
        .map(|names| {
            names
                .iter()
                .map(|n| untag(n).as_str().expect("NonKeyAttributes").to_owned())
                .collect()
        });
    Projection::builder()
        .projection_type(ProjectionType::from(
            str_field(projection, "ProjectionType", context).as_str(),
        ))
        .set_non_key_attributes(non_key)
        .build()
}

fn table_definition(logical_id: &str, resource: &Value) -> TableDefinition {
    let props = field(resource, "Properties", logical_id);
    let mapping = props
        .as_mapping()
        .unwrap_or_else(|| panic!("template.yaml: {logical_id}.Properties is not a mapping"));
    const HANDLED: &[&str] = &[
        "AttributeDefinitions",
        "KeySchema",
        "GlobalSecondaryIndexes",
        "BillingMode",
        "TimeToLiveSpecification",
    ];
    for key in mapping.keys() {
        let key = key.as_str().unwrap_or_default();
        assert!(
            HANDLED.contains(&key) || IGNORED_PROPERTIES.contains(&key),
            "template.yaml: {logical_id}.Properties.{key} is not understood by \
             koe_testkit::dynamodb: teach it, so the test tables match the deployed ones"
        );
    }

    let attribute_definitions = attribute_definitions(props, logical_id);

    let global_secondary_indexes = untag(props)
        .get("GlobalSecondaryIndexes")
        .map(|v| {
            untag(v)
                .as_sequence()
                .unwrap_or_else(|| panic!("{logical_id}.GlobalSecondaryIndexes is not a list"))
                .iter()
                .map(|gsi| {
                    let name = str_field(gsi, "IndexName", logical_id);
                    let context = format!("{logical_id}.{name}");
                    GlobalSecondaryIndex::builder()
                        .index_name(&name)
                        .set_key_schema(Some(key_schema(gsi, &context)))
                        .projection(projection(gsi, &context))
                        .build()
                        .unwrap_or_else(|e| panic!("template.yaml: {context}: {e}"))
                })
                .collect()
        })
        .unwrap_or_default();

    let billing_mode = untag(props)
        .get("BillingMode")
        .map(|v| BillingMode::from(untag(v).as_str().expect("BillingMode is a string")));

    let ttl_attribute = untag(props).get("TimeToLiveSpecification").and_then(|ttl| {
        let context = format!("{logical_id}.TimeToLiveSpecification");
        let enabled = field(ttl, "Enabled", &context)
            .as_bool()
            .unwrap_or_else(|| panic!("template.yaml: {context}.Enabled is not a boolean"));
        enabled.then(|| str_field(ttl, "AttributeName", &context))
    });

    TableDefinition {
        logical_id: logical_id.to_owned(),
        attribute_definitions,
        key_schema: key_schema(props, logical_id),
        global_secondary_indexes,
        billing_mode,
        ttl_attribute,
    }
}

/// Every `AWS::DynamoDB::Table` resource of `template.yaml`, in template order.
pub fn table_definitions() -> Vec<TableDefinition> {
    let template = load_yaml("template.yaml");
    let resources = template["Resources"]
        .as_mapping()
        .expect("template.yaml has Resources");
    resources
        .iter()
        .filter(|(_, resource)| resource["Type"].as_str() == Some("AWS::DynamoDB::Table"))
        .map(|(id, resource)| {
            table_definition(id.as_str().expect("logical ids are strings"), resource)
        })
        .collect()
}

/// A fresh random table-name prefix.
pub fn random_prefix() -> String {
    format!("t{:016x}", fastrand::u64(..))
}

/// Creates every table of `template.yaml` as `{prefix}-{logical id}` (with its TTL), and
/// returns the names of the three the store uses.
pub async fn create_tables(client: &Client, prefix: &str) -> TableNames {
    let definitions = table_definitions();
    for def in &definitions {
        let name = format!("{prefix}-{}", def.logical_id);
        let created = client
            .create_table()
            .table_name(&name)
            .set_attribute_definitions(Some(def.attribute_definitions.clone()))
            .set_key_schema(Some(def.key_schema.clone()))
            .set_global_secondary_indexes(
                (!def.global_secondary_indexes.is_empty())
                    .then(|| def.global_secondary_indexes.clone()),
            )
            .set_billing_mode(def.billing_mode.clone())
            .send()
            .await;
        match created {
            Ok(_) => {}
            // The SDK's retry of a create whose reply came late (a busy machine): the prefix is
            // random, so the table it finds is the one its first attempt made.
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_resource_in_use_exception()) => {}
            Err(e) => panic!("CreateTable {name}: {}", DisplayErrorContext(&e)),
        }
        if let Some(attribute) = &def.ttl_attribute {
            let spec = TimeToLiveSpecification::builder()
                .attribute_name(attribute)
                .enabled(true)
                .build()
                .expect("TTL specification");
            client
                .update_time_to_live()
                .table_name(&name)
                .time_to_live_specification(spec)
                .send()
                .await
                .unwrap_or_else(|e| panic!("UpdateTimeToLive {name}: {}", DisplayErrorContext(&e)));
        }
    }
    let name_of = |logical_id: &str| {
        assert!(
            definitions.iter().any(|d| d.logical_id == logical_id),
            "template.yaml declares no {logical_id}"
        );
        format!("{prefix}-{logical_id}")
    };
    TableNames {
        devices: name_of(DEVICES_TABLE),
        calls: name_of(CALLS_TABLE),
        usage: name_of(USAGE_TABLE),
    }
}

/// A `DynamoStore` on DynamoDB Local with its own fresh tables.
pub async fn fresh_store() -> DynamoStore {
    let client = client().await;
    let tables = create_tables(&client, &random_prefix()).await;
    DynamoStore::new(client, tables)
}
