//! What the limits proxy reads out of a Query: the partition its key condition names, whether
//! its answer shows everything it read, and the same Query without what trims the answer.

use serde_json::{Map, Value};

use super::{item_of, map_of};
use crate::dynamodb::limits::cost::key_text;
use crate::dynamodb::limits::{Item, TableDef};

pub(super) fn items_of(reply: &Value) -> Vec<Item> {
    reply
        .get("Items")
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(|i| item_of(Some(i))).collect())
        .unwrap_or_default()
}

/// Whether a Query's answer lacks some of what it read: items a filter dropped, attributes a
/// projection or `Select` left out.
pub(super) fn trimmed(request: &Map<String, Value>, reply: &Value) -> bool {
    let count = |field: &str| reply.get(field).and_then(Value::as_u64);
    request.contains_key("ProjectionExpression")
        || request.contains_key("AttributesToGet")
        || request.contains_key("Select")
        || count("ScannedCount") != count("Count")
}

/// The Query without what trims its answer, and only the names and values its key condition
/// still uses (DynamoDB refuses unused ones).
pub(super) fn evaluated_query(request: &Map<String, Value>) -> Value {
    let mut query = request.clone();
    for field in [
        "FilterExpression",
        "ProjectionExpression",
        "AttributesToGet",
        "Select",
        "QueryFilter",
        "ConditionalOperator",
    ] {
        query.remove(field);
    }
    let condition = request
        .get("KeyConditionExpression")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let words = expression_words(condition);
    for field in ["ExpressionAttributeNames", "ExpressionAttributeValues"] {
        if let Some(Value::Object(map)) = query.get_mut(field) {
            map.retain(|name, _| words.contains(name));
            if map.is_empty() {
                query.remove(field);
            }
        }
    }
    Value::Object(query)
}

/// The words of an expression: names, `#aliases`, `:values`, and `=` for each equality.
fn expression_words(expression: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut previous = ' ';
    for c in expression.chars() {
        if c.is_alphanumeric() || matches!(c, '_' | '#' | ':') {
            word.push(c);
        } else {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            if c == '=' && !matches!(previous, '<' | '>') {
                words.push("=".to_owned());
            }
        }
        previous = c;
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// The partition a Query reads: the value its key condition binds to the hash key of the table
/// or of the queried index.
pub(super) fn query_partition(def: &TableDef, request: &Map<String, Value>) -> Option<String> {
    let hash_key = match request.get("IndexName").and_then(Value::as_str) {
        Some(index) => &def.gsi(index)?.hash_key,
        None => &def.hash_key,
    };
    let names = map_of(request, "ExpressionAttributeNames");
    let values = map_of(request, "ExpressionAttributeValues");
    let condition = request.get("KeyConditionExpression")?.as_str()?;
    let resolve = |word: &str| match word.strip_prefix('#') {
        Some(_) => names.get(word).and_then(Value::as_str).map(str::to_owned),
        None => Some(word.to_owned()),
    };
    let words = expression_words(condition);
    words.windows(3).find_map(|w| {
        let [left, eq, right] = w else { return None };
        if eq != "=" {
            return None;
        }
        let (name, value) = if right.starts_with(':') {
            (left, right)
        } else {
            (right, left)
        };
        (resolve(name).as_deref() == Some(hash_key.as_str()))
            .then(|| values.get(value).map(key_text))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn the_partition_is_the_value_bound_to_the_queried_hash_key() {
        let dispatch = request(json!({
            "TableName": "calls", "IndexName": "byDueMinute",
            "KeyConditionExpression": "#dueMinute = :minute AND scheduledAtMs >= :from",
            "FilterExpression": "#status IN (:scheduled, :claimed)",
            "ExpressionAttributeNames": {"#dueMinute": "dueMinute", "#status": "status"},
            "ExpressionAttributeValues": {":minute": {"S": "22:00"}, ":from": {"N": "1"},
                ":scheduled": {"S": "scheduled"}, ":claimed": {"S": "claimed"}},
            "Select": "ALL_ATTRIBUTES",
        }));
        assert_eq!(
            query_partition(&TableDef::calls(), &dispatch).as_deref(),
            Some("22:00")
        );
        let reversed = request(json!({
            "TableName": "calls", "KeyConditionExpression": ":d = deviceId",
            "ExpressionAttributeValues": {":d": {"S": "d1"}},
        }));
        assert_eq!(
            query_partition(&TableDef::calls(), &reversed).as_deref(),
            Some("d1")
        );
        let unknown_index =
            request(json!({"IndexName": "nope", "KeyConditionExpression": "a = :a"}));
        assert_eq!(query_partition(&TableDef::calls(), &unknown_index), None);

        assert!(trimmed(&dispatch, &json!({"Count": 3, "ScannedCount": 3})));
        let all = evaluated_query(&dispatch);
        assert_eq!(
            all,
            json!({
                "TableName": "calls", "IndexName": "byDueMinute",
                "KeyConditionExpression": "#dueMinute = :minute AND scheduledAtMs >= :from",
                "ExpressionAttributeNames": {"#dueMinute": "dueMinute"},
                "ExpressionAttributeValues": {":minute": {"S": "22:00"}, ":from": {"N": "1"}},
            })
        );
        assert!(!trimmed(
            all.as_object().unwrap(),
            &json!({"Count": 3, "ScannedCount": 3})
        ));
    }
}
