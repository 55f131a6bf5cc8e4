//! What a request costs in the limits model: item sizes, write and read units, and which
//! partitions of the table and of each GSI pay them. Items are DynamoDB JSON (`{"S": "x"}`),
//! as the proxy sees them on the wire.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Capacity, Charge, Target};
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

/// An item's size by DynamoDB's rules, simplified: the sum over its attributes of the name's
/// UTF-8 length and the value's size (see [`value_size`]).
pub fn item_size(item: &Item) -> usize {
    item.iter()
        .map(|(name, value)| name.len() + value_size(value))
        .sum()
}

/// A value's size: a string its UTF-8 length; a number 1 byte per two significant digits plus
/// 1; a binary its decoded length; a boolean or null 1; a set the sum of its elements; a list or
/// map 3 bytes plus, per element, 1 byte, the element (and a map's key name).
pub fn value_size(value: &Value) -> usize {
    let Some((kind, inner)) = value.as_object().and_then(|o| o.iter().next()) else {
        return 0;
    };
    let text = || inner.as_str().unwrap_or_default();
    let list = || inner.as_array().map(Vec::as_slice).unwrap_or_default();
    match kind.as_str() {
        "S" => text().len(),
        "N" => number_size(text()),
        "B" => binary_size(text()),
        "BOOL" | "NULL" => 1,
        "SS" => list()
            .iter()
            .map(|v| v.as_str().unwrap_or_default().len())
            .sum(),
        "NS" => list()
            .iter()
            .map(|v| number_size(v.as_str().unwrap_or_default()))
            .sum(),
        "BS" => list()
            .iter()
            .map(|v| binary_size(v.as_str().unwrap_or_default()))
            .sum(),
        "L" => 3 + list().iter().map(|v| 1 + value_size(v)).sum::<usize>(),
        "M" => {
            let map = inner.as_object();
            3 + map
                .iter()
                .flat_map(|m| m.iter())
                .map(|(name, v)| 1 + name.len() + value_size(v))
                .sum::<usize>()
        }
        _ => 0,
    }
}

fn number_size(digits: &str) -> usize {
    let mantissa = digits.split(['e', 'E']).next().unwrap_or_default();
    let significant: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let significant = significant.trim_start_matches('0').trim_end_matches('0');
    significant.len().div_ceil(2) + 1
}

fn binary_size(base64: &str) -> usize {
    let padding = base64.bytes().rev().take_while(|b| *b == b'=').count();
    (base64.len() / 4 * 3).saturating_sub(padding)
}

/// Write units for an item of `bytes`: 1 per KB started, at least 1.
pub fn write_units(bytes: usize) -> f64 {
    bytes.div_ceil(1024).max(1) as f64
}

/// Read units for `bytes` read: 1 per 4 KB started (at least 4 KB), halved when eventually
/// consistent.
pub fn read_units(bytes: usize, consistent: bool) -> f64 {
    let units = bytes.div_ceil(4096).max(1) as f64;
    if consistent { units } else { units / 2.0 }
}

/// A partition key value as the buckets name it: the string, the number's digits, the base64.
pub fn key_text(value: &Value) -> String {
    value
        .as_object()
        .and_then(|o| o.values().next())
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| value.to_string())
}

fn write_charge(target: Target, key: &Value, bytes: usize) -> Charge {
    Charge {
        target,
        key: key_text(key),
        capacity: Capacity::Write,
        units: write_units(bytes),
    }
}

/// What a write of the item with `key` from `before` to `after` (`None`: no item) costs: the
/// larger image's units on its base partition, and on each GSI whose entry changes: a created
/// or removed entry 1 write, a changed index key 2 (the old entry's removal on the old
/// partition, the new one on the new), a changed projected attribute 1 (the larger entry's
/// size), an unchanged entry nothing.
pub fn write_charges(
    def: &TableDef,
    key: &Item,
    before: Option<&Item>,
    after: Option<&Item>,
) -> Vec<Charge> {
    let bytes = before.map_or(0, item_size).max(after.map_or(0, item_size));
    let hash = key.get(&def.hash_key).unwrap_or(&Value::Null);
    let mut charges = vec![write_charge(Target::base(&def.name), hash, bytes)];
    for gsi in &def.gsis {
        let target = || Target::index(&def.name, &gsi.name);
        let old = before.and_then(|item| def.projected(gsi, item));
        let new = after.and_then(|item| def.projected(gsi, item));
        match (old, new) {
            (None, None) => {}
            (Some(entry), None) | (None, Some(entry)) => {
                charges.push(write_charge(
                    target(),
                    &entry[&gsi.hash_key],
                    item_size(&entry),
                ));
            }
            (Some(old), Some(new)) => {
                let moved = old[&gsi.hash_key] != new[&gsi.hash_key]
                    || gsi.range_key.as_ref().is_some_and(|r| old[r] != new[r]);
                if moved {
                    charges.push(write_charge(target(), &old[&gsi.hash_key], item_size(&old)));
                    charges.push(write_charge(target(), &new[&gsi.hash_key], item_size(&new)));
                } else if old != new {
                    let bytes = item_size(&old).max(item_size(&new));
                    charges.push(write_charge(target(), &new[&gsi.hash_key], bytes));
                }
            }
        }
    }
    charges
}

/// The partition a write whose new item is unknown cannot be charged to (an update the model
/// cannot evaluate giving a GSI key a value it does not know).
pub const UNKNOWN_PARTITION: &str = "?";

/// What a write costs when its after-image is unknown (an UpdateExpression the model cannot
/// evaluate): every attribute it `mentions` is taken as changed and as large as `value_bytes`
/// (the size of all the request's values). The base pays for `before` plus `value_bytes`; a GSI
/// whose key is mentioned pays a removal and an insertion on the old partition (the new one is
/// unknown; [`UNKNOWN_PARTITION`] if there was no entry), one whose projection is mentioned 1
/// write.
pub fn unevaluated_charges(
    def: &TableDef,
    key: &Item,
    before: Option<&Item>,
    mentions: &[String],
    value_bytes: usize,
) -> Vec<Charge> {
    let bytes = before.map_or(0, item_size) + value_bytes;
    let hash = key.get(&def.hash_key).unwrap_or(&Value::Null);
    let mut charges = vec![write_charge(Target::base(&def.name), hash, bytes)];
    let mentioned = |name: &str| mentions.iter().any(|m| m == name);
    for gsi in &def.gsis {
        let target = || Target::index(&def.name, &gsi.name);
        let old = before.and_then(|item| def.projected(gsi, item));
        let key_mentioned =
            mentioned(&gsi.hash_key) || gsi.range_key.as_deref().is_some_and(mentioned);
        let projection_mentioned = match &gsi.projection {
            Projection::All => !mentions.is_empty(),
            Projection::KeysOnly => false,
            Projection::Include(extra) => extra.iter().any(|name| mentioned(name)),
        };
        match old {
            Some(old) if key_mentioned => {
                let size = item_size(&old) + value_bytes;
                charges.push(write_charge(target(), &old[&gsi.hash_key], size));
                charges.push(write_charge(target(), &old[&gsi.hash_key], size));
            }
            Some(old) if projection_mentioned => {
                let size = item_size(&old) + value_bytes;
                charges.push(write_charge(target(), &old[&gsi.hash_key], size));
            }
            Some(_) => {}
            None if key_mentioned => charges.push(Charge {
                target: target(),
                key: UNKNOWN_PARTITION.to_owned(),
                capacity: Capacity::Write,
                units: write_units(bytes),
            }),
            None => {}
        }
    }
    charges
}

/// What a read of `items` (a GetItem's item, or every item a Query evaluated, before any
/// filter) on the partition `key` of the table (`index: None`) or a GSI costs: their summed
/// size in 4 KB units, at least one, halved when eventually consistent.
pub fn read_charge<'a>(
    def: &TableDef,
    index: Option<&str>,
    key: &str,
    items: impl IntoIterator<Item = &'a Item>,
    consistent: bool,
) -> Charge {
    let target = match index {
        Some(index) => Target::index(&def.name, index),
        None => Target::base(&def.name),
    };
    let bytes = items.into_iter().map(item_size).sum();
    Charge {
        target,
        key: key.to_owned(),
        capacity: Capacity::Read,
        units: read_units(bytes, consistent),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn item(value: Value) -> Item {
        serde_json::from_value(value).unwrap()
    }

    fn units(charges: &[Charge]) -> Vec<(String, String, f64)> {
        charges
            .iter()
            .map(|c| (c.target.to_string(), c.key.clone(), c.units))
            .collect()
    }

    fn reservation(minute: &str, at: i64) -> Item {
        item(json!({
            "deviceId": {"S": "d1"}, "status": {"S": "scheduled"},
            "dueMinute": {"S": minute}, "scheduledAtMs": {"N": at.to_string()},
        }))
    }

    fn key() -> Item {
        item(json!({"deviceId": {"S": "d1"}}))
    }

    #[test]
    fn sizes_follow_dynamodbs_rules() {
        assert_eq!(item_size(&item(json!({"ab": {"S": "héllo"}}))), 2 + 6);
        assert_eq!(value_size(&json!({"N": "12345"})), 4);
        assert_eq!(value_size(&json!({"N": "-0.00120"})), 2);
        assert_eq!(value_size(&json!({"B": "AAECAw=="})), 4);
        assert_eq!(value_size(&json!({"BOOL": true})), 1);
        assert_eq!(
            value_size(&json!({"L": [{"S": "ab"}, {"NULL": true}]})),
            3 + 3 + 2
        );
        assert_eq!(value_size(&json!({"M": {"k": {"S": "v"}}})), 3 + 1 + 1 + 1);
        assert_eq!(value_size(&json!({"SS": ["a", "bc"]})), 3);
        assert_eq!(write_units(0), 1.0);
        assert_eq!(write_units(1024), 1.0);
        assert_eq!(write_units(1025), 2.0);
        assert_eq!(read_units(4097, true), 2.0);
        assert_eq!(read_units(10, false), 0.5);
    }

    #[test]
    fn a_write_pays_the_larger_image_on_its_base_partition() {
        let def = TableDef::calls();
        let big = item(json!({"deviceId": {"S": "d1"}, "blob": {"S": "x".repeat(3000)}}));
        let small = key();
        let charges = write_charges(&def, &key(), Some(&big), Some(&small));
        assert_eq!(units(&charges), [("calls".into(), "d1".into(), 3.0)]);
        let charges = write_charges(&def, &key(), None, None);
        assert_eq!(
            units(&charges),
            [("calls".into(), "d1".into(), 1.0)],
            "a delete of none"
        );
    }

    #[test]
    fn a_gsi_pays_only_when_the_entry_changes_and_a_key_change_pays_two_partitions() {
        let def = TableDef::calls();
        let gsi = "calls/byDueMinute".to_owned();
        let at_22 = reservation("22:00", 1);
        let created = write_charges(&def, &key(), None, Some(&at_22));
        assert_eq!(units(&created[1..]), [(gsi.clone(), "22:00".into(), 1.0)]);
        let moved = write_charges(&def, &key(), Some(&at_22), Some(&reservation("23:00", 1)));
        assert_eq!(
            units(&moved[1..]),
            [
                (gsi.clone(), "22:00".into(), 1.0),
                (gsi.clone(), "23:00".into(), 1.0)
            ]
        );
        let same = write_charges(&def, &key(), Some(&at_22), Some(&at_22));
        assert_eq!(same.len(), 1, "unchanged: the GSI pays nothing");
        let mut finished = at_22.clone();
        finished.remove("dueMinute");
        let removed = write_charges(&def, &key(), Some(&at_22), Some(&finished));
        assert_eq!(units(&removed[1..]), [(gsi.clone(), "22:00".into(), 1.0)]);
        let mut claimed = at_22.clone();
        claimed.insert("status".into(), json!({"S": "claimed"}));
        let changed = write_charges(&def, &key(), Some(&at_22), Some(&claimed));
        assert_eq!(
            units(&changed[1..]),
            [(gsi, "22:00".into(), 1.0)],
            "ALL projects status"
        );
    }

    #[test]
    fn an_include_projection_ignores_an_attribute_it_does_not_keep() {
        let mut def = TableDef::calls();
        def.gsis[0].projection = Projection::Include(vec!["status".into()]);
        let before = reservation("22:00", 1);
        let mut after = before.clone();
        after.insert("updatedAt".into(), json!({"S": "now"}));
        assert_eq!(
            write_charges(&def, &key(), Some(&before), Some(&after)).len(),
            1
        );
        after.insert("status".into(), json!({"S": "claimed"}));
        assert_eq!(
            write_charges(&def, &key(), Some(&before), Some(&after)).len(),
            2
        );
        def.gsis[0].projection = Projection::KeysOnly;
        assert_eq!(
            write_charges(&def, &key(), Some(&before), Some(&after)).len(),
            1
        );
        let moved = reservation("22:00", 2);
        assert_eq!(
            write_charges(&def, &key(), Some(&before), Some(&moved)).len(),
            3,
            "a range key change moves the entry"
        );
    }

    #[test]
    fn an_unevaluated_update_takes_every_mentioned_attribute_as_changed() {
        let def = TableDef::calls();
        let before = reservation("22:00", 1);
        let mentions = vec!["dueMinute".to_owned()];
        let charges = unevaluated_charges(&def, &key(), Some(&before), &mentions, 10);
        assert_eq!(
            units(&charges[1..]),
            [
                ("calls/byDueMinute".into(), "22:00".into(), 1.0),
                ("calls/byDueMinute".into(), "22:00".into(), 1.0)
            ]
        );
        let none: Vec<String> = Vec::new();
        assert_eq!(
            unevaluated_charges(&def, &key(), Some(&before), &none, 0).len(),
            1
        );
    }

    #[test]
    fn a_query_pays_the_summed_size_of_what_it_read() {
        let def = TableDef::calls();
        let items: Vec<Item> = (0..30)
            .map(|_| item(json!({"deviceId": {"S": "x".repeat(200)}})))
            .collect();
        // 30 × 208 bytes = 6240 bytes: two 4 KB units, halved.
        let charge = read_charge(&def, Some("byDueMinute"), "22:00", &items, false);
        assert_eq!(charge.target, Target::index("calls", "byDueMinute"));
        assert_eq!((charge.capacity, charge.units), (Capacity::Read, 1.0));
        assert_eq!(read_charge(&def, None, "d1", [], true).units, 1.0);
    }
}
