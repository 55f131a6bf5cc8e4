//! The due index is sparse: finished reservations leave it.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Duration, Utc};
use koe::domain::reservation::{Reservation, RunToken, ScheduledAt};
use koe::store::dynamodb::DynamoStore;
use koe::store::prelude::*;
use koe::store::{DUE_INDEX, Outcome, TableNames};

use super::{at, device_id, store};
use crate::count_estimate::call_id_that_counts;

/// Index entries in `minute`'s one shard (the tests here make few enough for one).
async fn index_count(client: &Client, tables: &TableNames, minute: &str) -> i32 {
    client
        .query()
        .table_name(&tables.calls)
        .index_name(DUE_INDEX)
        .key_condition_expression("#m = :m")
        .expression_attribute_names("#m", "dueShard")
        .expression_attribute_values(":m", AttributeValue::S(format!("{minute}#0")))
        .send()
        .await
        .unwrap()
        .count()
}

/// A claim of `r` at `now` by a run of its own (claims a minute old are abandoned).
async fn claim(store: &DynamoStore, r: &Reservation, now: DateTime<Utc>) -> bool {
    let (run, abandoned) = (RunToken::generate(), now - Duration::seconds(60));
    let claimed = store.claim_reservation(&r.device_id, &r.call_id, &run, now, abandoned);
    claimed.await.unwrap()
}

/// `r`'s outcome recorded at `now` by a run of its own.
async fn finish(
    store: &DynamoStore,
    r: &Reservation,
    outcome: Outcome,
    now: DateTime<Utc>,
) -> bool {
    let (run, abandoned) = (RunToken::generate(), now - Duration::seconds(60));
    let (device, call) = (&r.device_id, &r.call_id);
    let finished = store.finish_reservation(device, call, outcome, &run, now, abandoned);
    finished.await.unwrap()
}

#[tokio::test]
async fn finished_reservations_leave_the_due_index() {
    let (client, tables, store) = store().await;
    let now = at("2026-01-01T00:00:00Z");
    let minute = "2026-01-01T00:05Z";
    let stale_before = now - Duration::minutes(2);

    let mut calls = Vec::new();
    for (device, time) in [
        ("d-late", "2026-01-01T09:05:40+09:00"),
        ("d-early", "2026-01-01T00:05:01Z"),
        ("d-mid", "2026-01-01T00:05:20.5Z"),
    ] {
        let at_time = ScheduledAt::parse("scheduledAt", time, now).unwrap();
        let mut r = Reservation::new(device_id(device), at_time, None, now);
        // Call ids that do not raise the count (one in 32 does): all three in shard 0.
        r.call_id = call_id_that_counts(false);
        store
            .create_reservation(&r, now, stale_before)
            .await
            .unwrap();
        calls.push(r);
    }
    assert_eq!(store.due_count(minute).await.unwrap(), 0, "none counts");
    let due: Vec<String> = store
        .due_calls(minute, 0)
        .await
        .unwrap()
        .iter()
        .map(|r| r.device_id.as_str().to_owned())
        .collect();
    assert_eq!(due, ["d-early", "d-mid", "d-late"], "in time order");
    assert_eq!(index_count(&client, &tables, minute).await, 3);

    let send_at = at("2026-01-01T00:05:01Z");
    let early = &calls[1];
    assert!(claim(&store, early, send_at).await);
    assert_eq!(store.due_calls(minute, 0).await.unwrap().len(), 3);
    for (r, outcome) in [(&calls[1], Outcome::Sent), (&calls[0], Outcome::Missed)] {
        assert!(finish(&store, r, outcome, send_at).await);
    }
    let due = store.due_calls(minute, 0).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].device_id.as_str(), "d-mid");
    // Not filtered out: gone from the index itself.
    assert_eq!(index_count(&client, &tables, minute).await, 1);

    let mid = &calls[2];
    assert!(claim(&store, mid, send_at).await);
    assert!(finish(&store, mid, Outcome::Failed, send_at).await);
    assert!(store.due_calls(minute, 0).await.unwrap().is_empty());
    assert_eq!(index_count(&client, &tables, minute).await, 0);
}
