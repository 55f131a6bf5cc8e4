//! The store's section: which store (`STORE`), its table names and the DynamoDB endpoint.

use super::{ConfigError, Vars};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Memory,
    DynamoDb,
}

/// Physical table names (`DEVICES_TABLE`, `CALLS_TABLE`, `AGENT_USAGE_TABLE`). Also
/// `koe::store::TableNames`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableNames {
    pub devices: String,
    pub calls: String,
    pub usage: String,
}

impl Default for TableNames {
    fn default() -> Self {
        TableNames {
            devices: "devices".into(),
            calls: "scheduledCalls".into(),
            usage: "agentUsage".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    pub kind: StoreKind,
    pub tables: TableNames,
    /// Where the DynamoDB client sends its requests instead of AWS's regional endpoint
    /// (`AWS_ENDPOINT_URL_DYNAMODB`, DynamoDB Local in local runs and tests).
    pub dynamodb_endpoint: Option<String>,
}

impl StoreConfig {
    /// `STORE` (`memory`, the default, or `dynamodb`), `DEVICES_TABLE`, `CALLS_TABLE`,
    /// `AGENT_USAGE_TABLE` and `AWS_ENDPOINT_URL_DYNAMODB`.
    pub fn from_vars(vars: &Vars) -> Result<StoreConfig, ConfigError> {
        let kind = match vars.get("STORE").as_deref().map(str::trim) {
            None | Some("memory") => StoreKind::Memory,
            Some("dynamodb") => StoreKind::DynamoDb,
            Some(_) => {
                return Err(ConfigError {
                    var: "STORE",
                    reason: "must be memory or dynamodb".into(),
                });
            }
        };
        let defaults = TableNames::default();
        Ok(StoreConfig {
            kind,
            tables: TableNames {
                devices: vars.string_or("DEVICES_TABLE", &defaults.devices),
                calls: vars.string_or("CALLS_TABLE", &defaults.calls),
                usage: vars.string_or("AGENT_USAGE_TABLE", &defaults.usage),
            },
            dynamodb_endpoint: vars.get("AWS_ENDPOINT_URL_DYNAMODB"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::config::testing::reads_only;

    const OWN: &[&str] = &[
        "STORE",
        "DEVICES_TABLE",
        "CALLS_TABLE",
        "AGENT_USAGE_TABLE",
        "AWS_ENDPOINT_URL_DYNAMODB",
    ];

    fn from(pairs: &[(&str, &str)]) -> Result<StoreConfig, ConfigError> {
        StoreConfig::from_vars(&Vars::from_pairs(pairs))
    }

    #[test]
    fn store_and_tables_default_to_memory_and_the_spec_names() {
        let store = from(&[]).unwrap();
        assert_eq!(store.kind, StoreKind::Memory);
        assert_eq!(store.tables, TableNames::default());
        assert_eq!(store.dynamodb_endpoint, None);
        assert_eq!(
            from(&[("STORE", "dynamodb")]).unwrap().kind,
            StoreKind::DynamoDb
        );
        assert_eq!(from(&[("STORE", "postgres")]).unwrap_err().var, "STORE");
    }

    #[test]
    fn table_names_and_the_endpoint_are_read() {
        let store = from(&[
            ("DEVICES_TABLE", "koe-devices"),
            ("CALLS_TABLE", "koe-calls"),
            ("AGENT_USAGE_TABLE", "koe-usage"),
            ("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000"),
        ])
        .unwrap();
        assert_eq!(
            store.tables,
            TableNames {
                devices: "koe-devices".into(),
                calls: "koe-calls".into(),
                usage: "koe-usage".into(),
            }
        );
        assert_eq!(
            store.dynamodb_endpoint.as_deref(),
            Some("http://127.0.0.1:8000")
        );
        let blank = from(&[("AWS_ENDPOINT_URL_DYNAMODB", " ")]).unwrap();
        assert_eq!(blank.dynamodb_endpoint, None);
    }

    #[test]
    fn reads_only_its_own_variables() {
        reads_only(OWN, StoreConfig::from_vars).unwrap();
    }
}
