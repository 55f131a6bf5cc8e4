//! Fault injection: DynamoDB unavailable, for real. The test starts a DynamoDB Local of its own
//! (testkit's `DynamoDbLocal::on_disk`, data kept on disk), serves the real local
//! server on it with the deployed functions' client settings (3 s budget, standard retries),
//! kills DynamoDB while requests are in flight, checks every endpoint's answer during the
//! outage, and then starts DynamoDB again **on the same port with the same data**. The server
//! keeps the client it had, so this is the recovery a deployed function sees when DynamoDB comes
//! back: no restart, no new configuration.
//!
//! Expected (SPEC, docs/reliability.md, "What fails open and what fails closed"): `PUT /devices` and `POST`/`GET`/`DELETE /calls`
//! answer 503 `SERVICE_UNAVAILABLE` with the error body and an error notification, quickly. The
//! daily limit of `POST /agent` fails open: the call is answered, not counted, and
//! `X-RateLimit-Remaining` is left out. A dispatcher run counts store errors and sends nothing.
//! Nothing is half written: every write answered 2xx is there after the restart, every item
//! reads back whole through the store, and nothing refused during the outage appears later.
//!
//! Here: the requests and the checks of the outage; the test itself in `outage.rs`.

mod device_reads;
mod outage;

use std::time::{Duration, Instant};

use chrono::Utc;
use koe::domain::device::DeviceId;
use koe::domain::reservation::ReservationStatus;
use koe::store::dynamodb::DynamoStore;
use koe::store::prelude::*;
use koe_testkit::dynamodb::{self, DynamoDbLocal};
use koe_testkit::faults;
use koe_testkit::harness::{TestApp, error_body, send};
use serde_json::json;

pub(super) const DAILY_LIMIT: u32 = 5;

pub(super) fn token(n: u32) -> String {
    format!("{n:08x}").repeat(8)
}

pub(super) fn device_id(name: &str) -> DeviceId {
    DeviceId::parse("deviceId", name).unwrap()
}

pub(super) async fn put_device(app: &TestApp, id: &str, n: u32) -> reqwest::Response {
    send(
        app.agent(http::Method::PUT, "/devices")
            .body(json!({"deviceId": id, "voipToken": token(n)}).to_string()),
    )
    .await
}

pub(super) async fn post_call(app: &TestApp, id: &str) -> reqwest::Response {
    let at = (Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    send(
        app.agent(http::Method::POST, "/calls")
            .body(json!({"deviceId": id, "scheduledAt": at}).to_string()),
    )
    .await
}

pub(super) async fn get_call(app: &TestApp, id: &str) -> reqwest::Response {
    send(app.agent(http::Method::GET, &format!("/calls?deviceId={id}"))).await
}

pub(super) async fn delete_call(app: &TestApp, id: &str) -> reqwest::Response {
    send(app.agent(http::Method::DELETE, &format!("/calls?deviceId={id}"))).await
}

pub(super) async fn agent_round1(app: &TestApp, id: &str) -> reqwest::Response {
    send(
        app.agent(http::Method::POST, "/agent").body(
            json!({"message": "明日の予定は？", "capabilities": ["calendar"], "deviceId": id})
                .to_string(),
        ),
    )
    .await
}

/// The answer of `request` and how long it took.
pub(super) async fn timed(
    request: impl std::future::Future<Output = reqwest::Response>,
) -> (Duration, reqwest::Response) {
    let started = Instant::now();
    let response = request.await;
    (started.elapsed(), response)
}

/// Asserts the outage answer of one endpoint (503, error body) and reports the row with how long
/// it took: a figure, not asserted (a busy machine adds to it; the client's 3 s budget is its
/// configuration's, checked where it is built).
pub(super) async fn expect_503(what: &str, (took, response): (Duration, reqwest::Response)) {
    error_body(response, 503, "SERVICE_UNAVAILABLE").await;
    faults::record(
        &format!("DynamoDB: down during {what}"),
        "503 SERVICE_UNAVAILABLE + error body + notification, once the client's 3 s budget is spent",
        &format!(
            "503 SERVICE_UNAVAILABLE + error body in {} ms",
            took.as_millis()
        ),
    );
}

/// Every item of the three tables, read raw and then back through the store: a half-written
/// item (a missing or malformed attribute) is an error there. Returns the number of items.
pub(super) async fn assert_every_item_whole(ddb: &DynamoDbLocal, store: &DynamoStore) -> usize {
    let client = dynamodb::production_like_client(&ddb.endpoint);
    let tables = store.tables();
    let mut items = 0;
    let scan = |table: String| {
        let client = client.clone();
        async move {
            let output = client
                .scan()
                .table_name(&table)
                .send()
                .await
                .unwrap_or_else(|e| panic!("scan {table}: {e:?}"));
            assert!(output.last_evaluated_key().is_none(), "one page");
            output.items().to_vec()
        }
    };
    for item in scan(tables.devices.clone()).await {
        let id = item["deviceId"].as_s().unwrap();
        for attribute in ["voipToken", "environment", "updatedAt"] {
            assert!(
                item.contains_key(attribute),
                "device {id} lacks {attribute}"
            );
        }
        let device = store.get_device(&device_id(id), chrono::Utc::now()).await;
        assert!(
            matches!(device, Ok(Some(_))),
            "device {id} reads back: {device:?}"
        );
        items += 1;
    }
    for item in scan(tables.calls.clone()).await {
        let id = item["deviceId"].as_s().unwrap();
        if id.starts_with("due#") {
            // A minute's reservation count (the bucket index's shard count), not a call.
            assert!(item.contains_key("count") && item.contains_key("expireAt"));
            continue;
        }
        for attribute in [
            "callId",
            "scheduledAt",
            "scheduledAtMs",
            "status",
            "createdAt",
            "updatedAt",
        ] {
            assert!(
                item.contains_key(attribute),
                "call of {id} lacks {attribute}"
            );
        }
        let reservation = store.get_reservation(&device_id(id), Utc::now()).await;
        let Ok(Some(reservation)) = reservation else {
            panic!("call of {id} reads back: {reservation:?}");
        };
        if matches!(
            reservation.status,
            ReservationStatus::Scheduled | ReservationStatus::Claimed
        ) {
            assert!(
                item.contains_key("dueShard"),
                "a pending call of {id} is in the dispatcher's index"
            );
        }
        items += 1;
    }
    for item in scan(tables.usage.clone()).await {
        for attribute in ["deviceId", "day", "useCount", "expireAt"] {
            assert!(item.contains_key(attribute), "usage item lacks {attribute}");
        }
        items += 1;
    }
    items
}
