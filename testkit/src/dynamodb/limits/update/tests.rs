//! The update evaluator's tests: the stores' expressions, arithmetic, sets, what it cannot do.

use serde_json::json;

use super::*;

fn map(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

fn item(value: Value) -> Item {
    serde_json::from_value(value).unwrap()
}

#[test]
fn the_stores_expressions_are_evaluated() {
    let before = item(json!({
        "deviceId": {"S": "d"}, "status": {"S": "claimed"}, "dueMinute": {"S": "22:00"},
        "useCount": {"N": "2"},
    }));
    let names = map(json!({"#status": "status", "#dueMinute": "dueMinute",
        "#useCount": "useCount", "#expireAt": "expireAt"}));
    let values = map(json!({":outcome": {"S": "sent"}, ":amount": {"N": "3"},
        ":expireAt": {"N": "99"}}));
    let update = |expression: &str| apply_update(&before, expression, &names, &values).unwrap();
    let after = update("SET #status = :outcome, #expireAt = :expireAt REMOVE #dueMinute");
    assert_eq!(
        after,
        item(json!({"deviceId": {"S": "d"}, "status": {"S": "sent"},
            "useCount": {"N": "2"}, "expireAt": {"N": "99"}}))
    );
    let after = update("ADD #useCount :amount SET #expireAt = :expireAt");
    assert_eq!(after["useCount"], json!({"N": "5"}));
    assert_eq!(after["expireAt"], json!({"N": "99"}));
}

#[test]
fn if_not_exists_arithmetic_and_sets() {
    let before = item(json!({"k": {"S": "d"}, "n": {"N": "10"}, "tags": {"SS": ["a", "b"]}}));
    let names = map(json!({}));
    let values = map(
        json!({":one": {"N": "1"}, ":zero": {"N": "0"}, ":c": {"SS": ["c", "a"]},
        ":a": {"SS": ["a", "b"]}, ":l": {"L": [{"S": "x"}]}}),
    );
    let update = |expression: &str| apply_update(&before, expression, &names, &values).unwrap();
    let after = update(
        "set m = if_not_exists(m, :zero), n = n - :one, o = if_not_exists(n, :zero) add tags :c",
    );
    assert_eq!(after["m"], json!({"N": "0"}));
    assert_eq!(after["n"], json!({"N": "9"}));
    assert_eq!(
        after["o"],
        json!({"N": "10"}),
        "operands read the before-image"
    );
    assert_eq!(after["tags"], json!({"SS": ["a", "b", "c"]}));
    let after = update("DELETE tags :a SET l = list_append(:l, :l)");
    assert!(!after.contains_key("tags"), "an emptied set is removed");
    assert_eq!(after["l"], json!({"L": [{"S": "x"}, {"S": "x"}]}));
}

#[test]
fn what_it_cannot_evaluate_is_said_and_the_mentioned_attributes_listed() {
    let before = item(json!({"k": {"S": "d"}}));
    let names = map(json!({"#m": "meta", "#d": "dueMinute"}));
    let values = map(json!({":v": {"S": "x"}}));
    for expression in [
        "SET #m.inner = :v",
        "SET a = missing",
        "SET a = :nope",
        "SET a = size(b)",
        "SET a :v",
        "FROB a",
    ] {
        assert!(
            apply_update(&before, expression, &names, &values).is_err(),
            "{expression}"
        );
    }
    assert_eq!(
        mentioned_attributes(
            "SET #m.inner = :v, #d = if_not_exists(x, :v) REMOVE l[0]",
            &names
        ),
        ["meta", "dueMinute", "x", "l"]
    );
}
