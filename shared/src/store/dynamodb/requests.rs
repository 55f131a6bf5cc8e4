//! The adapter's common requests: a GetItem by partition key, and a conditional UpdateItem whose
//! attribute names are the `#name`s its expressions mention and whose values are those it uses
//! of the ones offered (DynamoDB refuses unused names and values), and its answer read back.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use chrono::{DateTime, Utc};

use super::{DEVICE_ID, Item, n, names, s, sdk_error};
use crate::domain::reservation::{CallId, ReservationStatus, rfc3339_millis};
use crate::store::StoreError;

/// The item under partition key `key` in `table`, read by `client`, `consistent` or not (with
/// `attributes`, only those): `None` if there is none.
pub(super) async fn read_item(
    client: &Client,
    table: &str,
    key: impl Into<String>,
    consistent: bool,
    attributes: &[&str],
) -> Result<Option<Item>, StoreError> {
    let projected = !attributes.is_empty();
    let projection: Vec<String> = attributes.iter().map(|name| format!("#{name}")).collect();
    let out = client
        .get_item()
        .table_name(table)
        .key(DEVICE_ID, s(key))
        .consistent_read(consistent)
        .set_projection_expression(projected.then(|| projection.join(", ")))
        .set_expression_attribute_names(projected.then(|| names(attributes)))
        .send()
        .await
        .map_err(|e| sdk_error("GetItem", table, e))?;
    Ok(out.item)
}

/// An UpdateItem by `client` of the item under partition key `key` in `table`: `update` if
/// `condition` holds, with the names the two mention and the values of `offered` they use.
pub(super) fn update_item(
    client: &Client,
    table: &str,
    key: impl Into<String>,
    update: &str,
    condition: &str,
    offered: Vec<(String, AttributeValue)>,
) -> UpdateItemFluentBuilder {
    let (names, values) = mentioned(update, condition, offered);
    client
        .update_item()
        .table_name(table)
        .key(DEVICE_ID, s(key))
        .update_expression(update)
        .condition_expression(condition)
        .set_expression_attribute_names(Some(names))
        .set_expression_attribute_values(values)
}

/// The attribute names `update` and `condition` mention, and the values of `offered` they use
/// (`None` if none): what an update's request carries.
#[allow(clippy::type_complexity)]
pub(super) fn mentioned(
    update: &str,
    condition: &str,
    offered: Vec<(String, AttributeValue)>,
) -> (
    HashMap<String, String>,
    Option<HashMap<String, AttributeValue>>,
) {
    let text = format!("{update} {condition}");
    let names: HashMap<String, String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '#'))
        .filter_map(|word| word.strip_prefix('#'))
        .map(|name| (format!("#{name}"), name.to_owned()))
        .collect();
    let values: HashMap<String, AttributeValue> = offered
        .into_iter()
        .filter(|(placeholder, _)| mentions(&text, placeholder))
        .collect();
    (names, (!values.is_empty()).then_some(values))
}

/// Sends a conditional UpdateItem, asking for the item as it was if its condition fails: `Ok`
/// with the attributes it returned (as its `return_values` asked), or `Err` with the item as it
/// was when its condition failed (`None`: there was none); any other failure is a store error.
pub(super) async fn answered(
    table: &str,
    request: UpdateItemFluentBuilder,
) -> Result<Result<Item, Option<Item>>, StoreError> {
    let sent = request
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .send()
        .await;
    let err = match sent {
        Ok(out) => return Ok(Ok(out.attributes.unwrap_or_default())),
        Err(err) => err,
    };
    match err.as_service_error() {
        Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
            Ok(Err(failed.item().cloned()))
        }
        _ => Err(sdk_error("UpdateItem", table, err)),
    }
}

/// Whether `text` uses the placeholder `token` (`:now` is not in `:nowMs`).
fn mentions(text: &str, token: &str) -> bool {
    text.match_indices(token).any(|(at, _)| {
        !text[at + token.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Values as [`update_item`] is offered them.
pub(super) fn offer(list: Vec<(&str, AttributeValue)>) -> Vec<(String, AttributeValue)> {
    list.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// The values a write on a call's record may use, with `more`: `:callId`, each status as
/// `:<status>` (`:scheduled`, `:claimed`, ...), and `now` as `:nowMs`, `:nowSecs` and
/// `:updatedAt`.
pub(super) fn call_values(
    call_id: &CallId,
    now: DateTime<Utc>,
    more: Vec<(&str, AttributeValue)>,
) -> Vec<(String, AttributeValue)> {
    let mut values = offer(vec![
        (":callId", s(call_id.as_str())),
        (":nowMs", n(now.timestamp_millis())),
        (":nowSecs", n(now.timestamp())),
        (":updatedAt", s(rfc3339_millis(now))),
    ]);
    let statuses =
        ReservationStatus::ALL.map(|status| (format!(":{}", status.as_str()), s(status.as_str())));
    values.extend(statuses);
    values.extend(offer(more));
    values
}
