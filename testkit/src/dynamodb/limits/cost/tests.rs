//! The costing's own tests: sizes, write images, GSI entries, unevaluated updates, queries.

use serde_json::json;

use super::*;
use crate::dynamodb::limits::{Capacity, Charge, Target};

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
