//! Which partitions of the table and of each GSI a write or a read pays, and how much.

use serde_json::Value;

use super::{Item, Projection, TableDef, item_size, key_text, read_units, write_units};
use crate::dynamodb::limits::{Capacity, Charge, Target};

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
