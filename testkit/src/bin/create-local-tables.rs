//! Creates the three tables, from `template.yaml`'s own definitions, in the DynamoDB that
//! `AWS_ENDPOINT_URL_DYNAMODB` names (DynamoDB Local), and prints the `export` lines that point
//! koe-local at them:
//!
//! ```sh
//! eval "$(cargo run -q -p koe-testkit --bin create-local-tables)"
//! ```
//!
//! The names are `<prefix>-<logical id>`, the prefix random unless `KOE_TABLE_PREFIX` names it
//! (`KOE_TABLE_PREFIX=koe-local` makes the tables `events/env.json` names).

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    if std::env::var("AWS_ENDPOINT_URL_DYNAMODB").is_err() {
        eprintln!(
            "create-local-tables: AWS_ENDPOINT_URL_DYNAMODB is not set (it creates tables only in DynamoDB Local)"
        );
        return ExitCode::FAILURE;
    }
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(koe::platform::aws_http::sdk_http_client())
        .load()
        .await;
    let client = aws_sdk_dynamodb::Client::new(&config);
    let prefix = std::env::var("KOE_TABLE_PREFIX")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| format!("koe-local-{}", koe_testkit::dynamodb::random_prefix()));
    let tables = koe_testkit::dynamodb::create_tables(&client, &prefix).await;
    println!("export DEVICES_TABLE={}", tables.devices);
    println!("export CALLS_TABLE={}", tables.calls);
    println!("export AGENT_USAGE_TABLE={}", tables.usage);
    ExitCode::SUCCESS
}
