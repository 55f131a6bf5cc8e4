//! Sizes by DynamoDB's rules, and the read and write units they take.

use serde_json::Value;

use super::Item;

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
