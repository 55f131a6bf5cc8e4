//! DynamoDB Local for tests: a client, and tables created from `template.yaml`'s own
//! `AWS::DynamoDB::Table` definitions (key schema, attribute definitions, GSIs, billing mode,
//! TTL), so the tests exercise exactly the tables that get deployed. Nothing about the schema is
//! written here.
//!
//! The endpoint comes from `KOE_TEST_DYNAMODB_ENDPOINT` (set by `scripts/test.sh`, which runs
//! `scripts/dynamodb-local.sh start`). Every store gets its own randomly prefixed tables, so tests
//! run in parallel against one instance.

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

use crate::template::load_yaml;

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
];

/// The endpoint of the running DynamoDB Local, or a panic saying how to start one.
pub fn endpoint() -> String {
    match std::env::var(ENDPOINT_VAR) {
        Ok(url) if !url.trim().is_empty() => url.trim().to_owned(),
        _ => panic!(
            "{ENDPOINT_VAR} is not set: run scripts/test.sh, or \
             `export {ENDPOINT_VAR}=$(scripts/dynamodb-local.sh start)`"
        ),
    }
}

/// A client for DynamoDB Local with fixed dummy credentials and region (nothing from the
/// environment but the endpoint). One per test: a client is tied to its test's runtime.
pub async fn client() -> Client {
    Client::from_conf(config_builder(&endpoint()).build())
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

/// The client configuration every testkit client starts from: the endpoint, fixed dummy
/// credentials and region.
pub fn config_builder(endpoint: &str) -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .http_client(koe::aws_http::sdk_http_client())
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

/// A DynamoDB Local of one test's own, run by `scripts/dynamodb-local.sh` with a state dir of
/// its own, keeping its data on disk (`KOE_DYNAMODB_PERSIST=1`), so that the test can stop it
/// (an outage) and start it again on the same port with the same tables and items (the
/// recovery), while the code under test keeps its client. Stopped and removed when dropped.
pub struct PrivateDynamoDb {
    state_dir: std::path::PathBuf,
    /// `http://127.0.0.1:<port>`, the same across restarts.
    pub endpoint: String,
    port: String,
}

impl PrivateDynamoDb {
    /// Starts a fresh instance on a free port.
    pub async fn start() -> PrivateDynamoDb {
        let state_dir = std::env::temp_dir().join(format!("koe-private-ddb-{}", random_prefix()));
        let endpoint = script(&state_dir, "start", None).await;
        let port = endpoint
            .rsplit_once(':')
            .map(|(_, port)| port.to_owned())
            .expect("the script prints http://127.0.0.1:<port>");
        PrivateDynamoDb {
            state_dir,
            endpoint,
            port,
        }
    }

    /// Stops the instance (its port refuses connections until `restart`).
    pub async fn stop(&self) {
        script(&self.state_dir, "stop", None).await;
    }

    /// Starts it again on the same port, with the data it had when it stopped.
    pub async fn restart(&self) {
        let endpoint = script(&self.state_dir, "start", Some(&self.port)).await;
        assert_eq!(endpoint, self.endpoint, "restarted on the same port");
    }
}

impl Drop for PrivateDynamoDb {
    fn drop(&mut self) {
        let _ = std::process::Command::new(
            crate::template::repo_root().join("scripts/dynamodb-local.sh"),
        )
        .arg("stop")
        .env("KOE_STATE_DIR", &self.state_dir)
        .stderr(std::process::Stdio::null())
        .status();
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

/// Runs `scripts/dynamodb-local.sh <command>` for the instance in `state_dir`; returns its stdout.
async fn script(state_dir: &std::path::Path, command: &str, port: Option<&str>) -> String {
    let mut cmd =
        std::process::Command::new(crate::template::repo_root().join("scripts/dynamodb-local.sh"));
    cmd.arg(command)
        .env("KOE_STATE_DIR", state_dir)
        .env("KOE_DYNAMODB_PERSIST", "1")
        .env_remove("KOE_DYNAMODB_PORT");
    if let Some(port) = port {
        cmd.env("KOE_DYNAMODB_PORT", port);
    }
    let output = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("the script's thread")
        .expect("scripts/dynamodb-local.sh runs");
    assert!(
        output.status.success(),
        "scripts/dynamodb-local.sh {command} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
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

fn key_schema(value: &Value, context: &str) -> Vec<KeySchemaElement> {
    list(value, "KeySchema", context)
        .iter()
        .map(|element| {
            KeySchemaElement::builder()
                .attribute_name(str_field(element, "AttributeName", context))
                .key_type(KeyType::from(
                    str_field(element, "KeyType", context).as_str(),
                ))
                .build()
                .unwrap_or_else(|e| panic!("template.yaml: {context}.KeySchema: {e}"))
        })
        .collect()
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

    let attribute_definitions = list(props, "AttributeDefinitions", logical_id)
        .iter()
        .map(|def| {
            AttributeDefinition::builder()
                .attribute_name(str_field(def, "AttributeName", logical_id))
                .attribute_type(ScalarAttributeType::from(
                    str_field(def, "AttributeType", logical_id).as_str(),
                ))
                .build()
                .unwrap_or_else(|e| panic!("template.yaml: {logical_id}.AttributeDefinitions: {e}"))
        })
        .collect();

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
        client
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
            .await
            .unwrap_or_else(|e| panic!("CreateTable {name}: {}", DisplayErrorContext(&e)));
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
