//! Operands and actions on values: attribute reads, if_not_exists, list_append, numbers and sets.

use serde_json::{Map, Value};

use super::{Operand, Unevaluable};
use crate::dynamodb::limits::cost::Item;

pub(super) fn evaluate(before: &Item, operand: &Operand) -> Result<Value, Unevaluable> {
    match operand {
        Operand::Value(v) => Ok(v.clone()),
        Operand::Path(path) => before
            .get(path)
            .cloned()
            .ok_or_else(|| Unevaluable(format!("{path} is not in the item"))),
        Operand::IfNotExists(path, default) => match before.get(path) {
            Some(v) => Ok(v.clone()),
            None => evaluate(before, default),
        },
        Operand::ListAppend(first, second) => {
            let list = |v: Value| match v.get("L").and_then(Value::as_array) {
                Some(l) => Ok(l.clone()),
                None => Err(Unevaluable("list_append of a non-list".into())),
            };
            let mut joined = list(evaluate(before, first)?)?;
            joined.extend(list(evaluate(before, second)?)?);
            Ok(serde_json::json!({ "L": joined }))
        }
    }
}

fn number(value: &Value) -> Result<&str, Unevaluable> {
    value
        .get("N")
        .and_then(Value::as_str)
        .ok_or_else(|| Unevaluable("arithmetic on a non-number".into()))
}

pub(super) fn arithmetic(left: &Value, op: char, right: &Value) -> Result<Value, Unevaluable> {
    let (a, b) = (number(left)?, number(right)?);
    let sign = if op == '-' { -1 } else { 1 };
    let result = match (a.parse::<i128>(), b.parse::<i128>()) {
        (Ok(a), Ok(b)) => (a + sign * b).to_string(),
        _ => {
            let parse = |n: &str| {
                n.parse::<f64>()
                    .map_err(|_| Unevaluable(format!("number {n}")))
            };
            (parse(a)? + sign as f64 * parse(b)?).to_string()
        }
    };
    Ok(serde_json::json!({ "N": result }))
}

/// `ADD` (union) or `DELETE` (difference) of one set to another of the same type.
pub(super) fn set_update(old: &Value, operand: &Value, add: bool) -> Result<Value, Unevaluable> {
    let set = |v: &Value| {
        v.as_object()
            .and_then(|o| o.iter().next())
            .filter(|(kind, _)| matches!(kind.as_str(), "SS" | "NS" | "BS"))
            .and_then(|(kind, list)| Some((kind.clone(), list.as_array()?.clone())))
            .ok_or_else(|| Unevaluable("ADD or DELETE of a non-set".into()))
    };
    let (kind, mut elements) = set(old)?;
    let (other_kind, others) = set(operand)?;
    if kind != other_kind {
        return Err(Unevaluable("ADD or DELETE of sets of two types".into()));
    }
    if add {
        for e in others {
            if !elements.contains(&e) {
                elements.push(e);
            }
        }
    } else {
        elements.retain(|e| !others.contains(e));
    }
    let mut out = Map::new();
    out.insert(kind, Value::Array(elements));
    Ok(Value::Object(out))
}
