//! What a request costs in the limits model: item sizes, write and read units, and which
//! partitions of the table and of each GSI pay them. Items are DynamoDB JSON (`{"S": "x"}`),
//! as the proxy sees them on the wire.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::dynamodb::{TableDefinition, table_definitions};

/// An item (or a key) in DynamoDB JSON: attribute name to `{"S": ..}`, `{"N": ..}`, ...
pub type Item = BTreeMap<String, Value>;

/// Which attributes a GSI keeps besides its and the table's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Projection {
    KeysOnly,
    Include(Vec<String>),
    All,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GsiDef {
    pub name: String,
    pub hash_key: String,
    pub range_key: Option<String>,
    pub projection: Projection,
}

/// The key schema and GSIs of one table, under the name a test created it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDef {
    pub name: String,
    pub hash_key: String,
    pub range_key: Option<String>,
    pub gsis: Vec<GsiDef>,
}

#[cfg(test)]
impl TableDef {
    /// The calls table as `template.yaml` defines it: keyed by device, its `byDueMinute` index
    /// by minute and time. The unit tests cost their writes and queries on it.
    pub(crate) fn calls() -> TableDef {
        TableDef {
            name: "calls".to_owned(),
            hash_key: "deviceId".to_owned(),
            range_key: None,
            gsis: vec![GsiDef {
                name: "byDueMinute".to_owned(),
                hash_key: "dueMinute".to_owned(),
                range_key: Some("scheduledAtMs".to_owned()),
                projection: Projection::All,
            }],
        }
    }
}

impl TableDef {
    /// `template.yaml`'s table `logical_id` (e.g. `CallsTable`), created as `table_name`.
    pub fn from_template(logical_id: &str, table_name: &str) -> TableDef {
        let definitions = table_definitions();
        let def = definitions
            .iter()
            .find(|d| d.logical_id == logical_id)
            .unwrap_or_else(|| panic!("template.yaml declares no table {logical_id}"));
        Self::from_definition(def, table_name)
    }

    pub fn from_definition(def: &TableDefinition, table_name: &str) -> TableDef {
        use aws_sdk_dynamodb::types::{KeySchemaElement, KeyType, ProjectionType};
        let keys = |schema: &[KeySchemaElement]| {
            let of = |kind: KeyType| {
                schema
                    .iter()
                    .find(|k| k.key_type == kind)
                    .map(|k| k.attribute_name.clone())
            };
            (of(KeyType::Hash).expect("a HASH key"), of(KeyType::Range))
        };
        let (hash_key, range_key) = keys(&def.key_schema);
        let gsis = def
            .global_secondary_indexes
            .iter()
            .map(|gsi| {
                let (hash_key, range_key) = keys(gsi.key_schema());
                let projection = gsi.projection.as_ref().expect("a GSI projection");
                let projection = match projection.projection_type {
                    Some(ProjectionType::All) => Projection::All,
                    Some(ProjectionType::Include) => {
                        Projection::Include(projection.non_key_attributes().to_vec())
                    }
                    _ => Projection::KeysOnly,
                };
                GsiDef {
                    name: gsi.index_name.clone(),
                    hash_key,
                    range_key,
                    projection,
                }
            })
            .collect();
        TableDef {
            name: table_name.to_owned(),
            hash_key,
            range_key,
            gsis,
        }
    }

    pub fn gsi(&self, name: &str) -> Option<&GsiDef> {
        self.gsis.iter().find(|g| g.name == name)
    }

    /// The table's key attributes of `item` (those it has).
    pub fn key_of(&self, item: &Item) -> Item {
        self.key_names()
            .filter_map(|name| Some((name.to_owned(), item.get(name)?.clone())))
            .collect()
    }

    fn key_names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.hash_key.as_str()).chain(self.range_key.as_deref())
    }

    /// The entry `item` has in `gsi`, if it has one (both index keys present: GSIs are sparse).
    pub fn projected(&self, gsi: &GsiDef, item: &Item) -> Option<Item> {
        let index_keys = std::iter::once(gsi.hash_key.as_str()).chain(gsi.range_key.as_deref());
        if !index_keys.clone().all(|name| item.contains_key(name)) {
            return None;
        }
        let kept: Vec<&str> = match &gsi.projection {
            Projection::All => return Some(item.clone()),
            Projection::KeysOnly => index_keys.chain(self.key_names()).collect(),
            Projection::Include(extra) => index_keys
                .chain(self.key_names())
                .chain(extra.iter().map(String::as_str))
                .collect(),
        };
        Some(
            item.iter()
                .filter(|(name, _)| kept.contains(&name.as_str()))
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect(),
        )
    }
}
mod charges;
mod size;
#[cfg(test)]
mod tests;

pub use self::charges::{UNKNOWN_PARTITION, read_charge, unevaluated_charges, write_charges};
pub use self::size::{item_size, key_text, read_units, value_size, write_units};
