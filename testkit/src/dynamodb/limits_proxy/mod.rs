//! A proxy in front of DynamoDB Local that enforces the limits model (`limits`): a write or
//! read a partition of the table or of a GSI, or the table or GSI as a whole, cannot take is
//! answered with DynamoDB's own `ThrottlingException` and not carried out, so the real SDK, its error and its retries are
//! exercised. Everything else is forwarded unchanged, and answered with DynamoDB Local's answer.
//!
//! - PutItem, UpdateItem, DeleteItem: the item's current version is read first (a consistent
//!   GetItem, not charged; not atomic with the write), the after-image computed (UpdateItem:
//!   `limits::update`), the write charged to its base partition and to every GSI partition whose
//!   entry changes, all or nothing, before forwarding. A write DynamoDB Local then refuses on its
//!   condition keeps its base charge only (as DynamoDB charges it); any other refusal pays
//!   nothing.
//! - TransactWriteItems: each action costed as its own write (its item read first), its
//!   base-table units doubled (2 WCU per KB), all charged at once (`transact_write`).
//! - GetItem, Query: the least a read can cost (0.5 or 1 RCU) is charged before forwarding (an
//!   empty bucket throttles it), the rest from what DynamoDB Local answered, even into debt (a
//!   read DynamoDB Local refuses pays nothing). A Query pays for every item it evaluated: when
//!   a filter dropped some, or a projection or `Select` trimmed them, the proxy asks again
//!   without those (uncharged) to see them.
//! - Other operations (and tables it was not told about) pass uncharged.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::BodyExt;
use serde_json::{Map, Value, json};

use super::front;
use crate::loopback::Loopback;

use self::query::{evaluated_query, items_of, query_partition, trimmed};
use super::limits::cost::key_text;
use super::limits::update::{apply_update, mentioned_attributes};
use super::limits::{
    Capacity, Charge, Item, Level, Limits, LimitsModel, Stats, TableDef, Throttled, item_size,
    read_charge, unevaluated_charges, write_charges,
};

const JSON_1_0: &str = "application/x-amz-json-1.0";

struct Shared {
    upstream: String,
    client: reqwest::Client,
    tables: HashMap<String, TableDef>,
    model: Arc<LimitsModel>,
}

pub struct LimitsProxy {
    server: Loopback,
    shared: Arc<Shared>,
}

/// DynamoDB Local's answer.
struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    fn is_condition_failure(&self) -> bool {
        self.status == 400
            && String::from_utf8_lossy(&self.body).contains("ConditionalCheckFailedException")
    }
}

impl LimitsProxy {
    /// Forwards to the DynamoDB at `upstream` (an `http://host:port` URL), holding `tables` to
    /// `limits` on the real clock.
    pub async fn start(upstream: &str, tables: &[TableDef], limits: Limits) -> LimitsProxy {
        Self::with_model(upstream, tables, Arc::new(LimitsModel::new(limits))).await
    }

    /// As [`LimitsProxy::start`], with a model of the caller's (e.g. on a frozen clock).
    /// [`with_model`](Self::with_model) over the template's two tables, named as in `tables`.
    pub async fn over_tables(
        upstream: &str,
        tables: &koe::store::TableNames,
        model: Arc<LimitsModel>,
    ) -> LimitsProxy {
        let defs = [
            TableDef::from_template("CallsTable", &tables.calls),
            TableDef::from_template("DevicesTable", &tables.devices),
        ];
        Self::with_model(upstream, &defs, model).await
    }

    pub async fn with_model(
        upstream: &str,
        tables: &[TableDef],
        model: Arc<LimitsModel>,
    ) -> LimitsProxy {
        let shared = Arc::new(Shared {
            upstream: upstream.trim_end_matches('/').to_owned(),
            client: reqwest::Client::new(),
            tables: tables.iter().map(|t| (t.name.clone(), t.clone())).collect(),
            model,
        });
        let server = front::start_proxy("the limits proxy", &shared, handle).await;
        LimitsProxy { server, shared }
    }

    /// The endpoint clients use instead of DynamoDB's.
    pub fn url(&self) -> String {
        self.server.url()
    }

    pub fn stats(&self) -> Stats {
        self.shared.model.stats()
    }

    pub fn model(&self) -> &Arc<LimitsModel> {
        &self.shared.model
    }
}

fn io(e: &dyn std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// One client request as the proxy received it.
struct Call<'a> {
    shared: &'a Shared,
    headers: &'a HeaderMap,
    operation: &'a str,
    request: &'a Map<String, Value>,
    body: Bytes,
}

impl Call<'_> {
    /// Sends the request as received.
    async fn forward(&self) -> Result<Answer, std::io::Error> {
        self.send(self.operation, self.body.clone()).await
    }

    /// Sends `body` as `operation` with this request's headers.
    async fn send(&self, operation: &str, body: Bytes) -> Result<Answer, std::io::Error> {
        send(self.shared, self.headers, operation, body).await
    }
}

async fn handle(
    shared: Arc<Shared>,
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<front::Response, std::io::Error> {
    let shared = shared.as_ref();
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map_err(|e| io(&e))?.to_bytes();
    let operation = front::operation(&parts.headers);
    let request: Map<String, Value> = serde_json::from_slice(&body).unwrap_or_default();
    let def = request
        .get("TableName")
        .and_then(Value::as_str)
        .and_then(|name| shared.tables.get(name));
    let call = Call {
        shared,
        headers: &parts.headers,
        operation: &operation,
        request: &request,
        body,
    };
    let answer = match (operation.as_str(), def) {
        ("PutItem" | "UpdateItem" | "DeleteItem", Some(def)) => write(call, def).await?,
        ("GetItem" | "Query", Some(def)) => read(call, def).await?,
        ("TransactWriteItems", _) => transact_write(call).await?,
        _ => call.forward().await?,
    };
    Ok(front::respond(answer.status, &answer.headers, answer.body))
}

/// Sends `body` as `operation` to DynamoDB Local with the client's headers (its signature is
/// not checked there; its access key and region pick the tables).
async fn send(
    shared: &Shared,
    headers: &HeaderMap,
    operation: &str,
    body: Bytes,
) -> Result<Answer, std::io::Error> {
    let mut upstream = shared
        .client
        .post(format!("{}/", shared.upstream))
        .body(body);
    for (name, value) in headers {
        if name != http::header::HOST
            && name != http::header::CONTENT_LENGTH
            && name != "x-amz-target"
        {
            upstream = upstream.header(name, value);
        }
    }
    let answer = upstream
        .header("x-amz-target", format!("DynamoDB_20120810.{operation}"))
        .send()
        .await
        .map_err(|e| io(&e))?;
    Ok(Answer {
        status: answer.status().as_u16(),
        headers: answer.headers().clone(),
        body: answer.bytes().await.map_err(|e| io(&e))?,
    })
}

/// DynamoDB's answer to a request the model throttled. Its reason: a partition's, or a warm
/// throughput's (a new table's 4,000 WRU/s is its first partitions' capacity),
/// `KeyRangeThroughputExceeded`; the per-table quota's, `AccountLimitExceeded`.
fn throttled(t: &Throttled) -> Answer {
    let (kind, resource) = match &t.target.index {
        Some(index) => ("Index", format!("table/{}/index/{index}", t.target.table)),
        None => ("Table", format!("table/{}", t.target.table)),
    };
    let capacity = match t.capacity {
        Capacity::Write => "Write",
        Capacity::Read => "Read",
    };
    let limit = match t.level {
        Level::Partition | Level::Table => "KeyRangeThroughputExceeded",
        Level::Quota => "AccountLimitExceeded",
    };
    let body = json!({
        "__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException",
        "message": t.message(),
        "throttlingReasons": [{
            "reason": format!("{kind}{capacity}{limit}"),
            "resource": format!("arn:aws:dynamodb:{}:000000000000:{resource}", super::REGION),
        }],
    });
    let mut headers = HeaderMap::new();
    headers.insert(http::header::CONTENT_TYPE, JSON_1_0.parse().unwrap());
    headers.insert(
        "x-amzn-requestid",
        format!("koe-limits-{:016x}", fastrand::u64(..))
            .parse()
            .unwrap(),
    );
    Answer {
        status: 400,
        headers,
        body: Bytes::from(body.to_string()),
    }
}

fn item_of(value: Option<&Value>) -> Option<Item> {
    value.and_then(|v| serde_json::from_value(v.clone()).ok())
}

fn map_of<'a>(request: &'a Map<String, Value>, field: &str) -> &'a Map<String, Value> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    request
        .get(field)
        .and_then(Value::as_object)
        .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
}

/// What one write (`body`: a request, or a transaction's action) is costed from: the item it
/// puts (if any), its key, and the item as stored before it (a consistent GetItem). `None`
/// where that read is refused: no before-image (e.g. a malformed key), DynamoDB Local's own
/// refusal will do.
async fn before_image(
    call: &Call<'_>,
    def: &TableDef,
    body: &Map<String, Value>,
) -> Result<Option<(Option<Item>, Item, Option<Item>)>, std::io::Error> {
    let item = item_of(body.get("Item"));
    let key = match &item {
        Some(item) => def.key_of(item),
        None => item_of(body.get("Key")).unwrap_or_default(),
    };
    let get = json!({"TableName": def.name, "Key": key, "ConsistentRead": true});
    let current = call.send("GetItem", Bytes::from(get.to_string())).await?;
    if current.status != 200 {
        return Ok(None);
    }
    let before = item_of(current.json().as_ref().and_then(|v| v.get("Item")));
    Ok(Some((item, key, before)))
}

async fn write(call: Call<'_>, def: &TableDef) -> Result<Answer, std::io::Error> {
    let (operation, request) = (call.operation, call.request);
    let Some((item, key, before)) = before_image(&call, def, request).await? else {
        return call.forward().await;
    };
    let charges = match operation {
        "PutItem" => write_charges(def, &key, before.as_ref(), item.as_ref()),
        "DeleteItem" => write_charges(def, &key, before.as_ref(), None),
        _ => update_charges(def, &key, before.as_ref(), request),
    };
    charged_forward(&call, charges, Answer::is_condition_failure).await
}

/// Charges `charges` and forwards the request: a throttled one is answered as DynamoDB would
/// and not made; one refused on its condition (`on_condition`) keeps its base-table charges
/// (its index ones refunded); any other refusal is refunded whole.
async fn charged_forward(
    call: &Call<'_>,
    charges: Vec<Charge>,
    on_condition: impl Fn(&Answer) -> bool,
) -> Result<Answer, std::io::Error> {
    let shared = call.shared;
    if let Err(t) = shared.model.charge(call.operation, &charges) {
        return Ok(throttled(&t));
    }
    let answer = call.forward().await?;
    if on_condition(&answer) {
        let gsi: Vec<Charge> = charges
            .into_iter()
            .filter(|c| c.target.index.is_some())
            .collect();
        shared.model.refund(&gsi);
    } else if answer.status != 200 {
        shared.model.refund(&charges);
    }
    Ok(answer)
}

/// A TransactWriteItems: each action costed as its single write would be (its item read
/// first), its base-table units doubled (a transactional write takes 2 WCU per KB; index
/// entries as usual), all charged at once. A transaction cancelled on a condition keeps its
/// base charges; any other refusal pays nothing.
async fn transact_write(call: Call<'_>) -> Result<Answer, std::io::Error> {
    let (shared, request) = (call.shared, call.request);
    let actions = request
        .get("TransactItems")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut charges = Vec::new();
    for action in &actions {
        let Some((kind, body)) = action.as_object().and_then(|a| a.iter().next()) else {
            continue;
        };
        let Some(body) = body.as_object() else {
            continue;
        };
        let def = body
            .get("TableName")
            .and_then(Value::as_str)
            .and_then(|name| shared.tables.get(name));
        let Some(def) = def else {
            continue;
        };
        let Some((item, key, before)) = before_image(&call, def, body).await? else {
            return call.forward().await;
        };
        let mut action_charges = match kind.as_str() {
            "Put" => write_charges(def, &key, before.as_ref(), item.as_ref()),
            "Delete" => write_charges(def, &key, before.as_ref(), None),
            "Update" => update_charges(def, &key, before.as_ref(), body),
            // A ConditionCheck writes nothing: its item's base units only.
            _ => write_charges(def, &key, before.as_ref(), before.as_ref())
                .into_iter()
                .filter(|c| c.target.index.is_none())
                .collect(),
        };
        for c in &mut action_charges {
            if c.target.index.is_none() {
                c.units *= 2.0;
            }
        }
        charges.extend(action_charges);
    }
    let cancelled = |answer: &Answer| {
        answer.status == 400
            && String::from_utf8_lossy(&answer.body).contains("TransactionCanceledException")
    };
    charged_forward(&call, charges, cancelled).await
}

fn update_charges(
    def: &TableDef,
    key: &Item,
    before: Option<&Item>,
    request: &Map<String, Value>,
) -> Vec<Charge> {
    let names = map_of(request, "ExpressionAttributeNames");
    let values = map_of(request, "ExpressionAttributeValues");
    let value_bytes = || {
        let values: Item = values.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        item_size(&values)
    };
    let Some(expression) = request.get("UpdateExpression").and_then(Value::as_str) else {
        // The legacy AttributeUpdates: not evaluated, every named attribute changed.
        let updates = map_of(request, "AttributeUpdates");
        let mentions: Vec<String> = updates.keys().cloned().collect();
        let bytes = item_size(
            &updates
                .iter()
                .filter_map(|(k, update)| Some((k.clone(), update.get("Value")?.clone())))
                .collect(),
        );
        return unevaluated_charges(def, key, before, &mentions, bytes);
    };
    let start = before.cloned().unwrap_or_else(|| key.clone());
    match apply_update(&start, expression, names, values) {
        Ok(after) => write_charges(def, key, before, Some(&after)),
        Err(_) => {
            let mentions = mentioned_attributes(expression, names);
            unevaluated_charges(def, key, before, &mentions, value_bytes())
        }
    }
}

async fn read(call: Call<'_>, def: &TableDef) -> Result<Answer, std::io::Error> {
    let (shared, operation, request) = (call.shared, call.operation, call.request);
    let consistent = request.get("ConsistentRead") == Some(&Value::Bool(true));
    let index = request.get("IndexName").and_then(Value::as_str);
    let partition = match operation {
        "GetItem" => request
            .get("Key")
            .and_then(|key| key.get(&def.hash_key))
            .map(key_text),
        _ => query_partition(def, request),
    };
    let Some(partition) = partition else {
        return call.forward().await;
    };
    let least = read_charge(def, index, &partition, [], consistent);
    if let Err(t) = shared.model.charge(operation, std::slice::from_ref(&least)) {
        return Ok(throttled(&t));
    }
    let answer = call.forward().await?;
    if answer.status != 200 {
        // A refused read (a validation error, say) costs nothing.
        shared.model.refund(std::slice::from_ref(&least));
        return Ok(answer);
    }
    let reply = answer.json().unwrap_or_default();
    let items: Vec<Item> = if operation == "GetItem" {
        item_of(reply.get("Item")).into_iter().collect()
    } else if trimmed(request, &reply) {
        let all = evaluated_query(request);
        let again = call.send(operation, Bytes::from(all.to_string())).await?;
        items_of(&again.json().unwrap_or_default())
    } else {
        items_of(&reply)
    };
    let mut cost = read_charge(def, index, &partition, &items, consistent);
    cost.units -= least.units;
    if cost.units > 0.0 {
        shared.model.debit(&[cost]);
    }
    Ok(answer)
}

mod query;

#[cfg(test)]
mod tests;
