//! Due reservations: the time-bucket index of each minute, spread over shards.

use chrono::{Duration, TimeZone, Utc};
use koe::domain::due::{CALLS_PER_SHARD, DueCall, shards_for};
use koe::domain::reservation::{Reservation, minute_bucket};
use koe::store::Outcome;

use super::{
    DynStore, GRACE, JST, claim, create, finish, new_device_id, scheduled_at, secs, try_cancel,
};

async fn due_calls_list_scheduled_and_claimed_of_that_minute_in_time_order(store: DynStore) {
    // A random minute, so even shared tables hold nothing else in it.
    let minute = Utc.with_ymd_and_hms(2035, 1, 1, 0, 0, 0).unwrap()
        + Duration::minutes(fastrand::i64(0..500_000));
    let now = minute - Duration::minutes(5);
    let bucket = minute_bucket(minute);
    let make = |offset_ms: i64, offset_east: i32| {
        let id = new_device_id();
        let lead = Duration::minutes(5) + Duration::milliseconds(offset_ms);
        Reservation::new(
            id,
            scheduled_at(now, lead, offset_east),
            Some("Mika".into()),
            now,
        )
    };
    let a = make(40_000, JST);
    let b = make(5_250, 5 * 3600 + 1800);
    let b2 = make(5_100, 0);
    let c = make(20_000, -(3 * 3600 + 1800));
    let g = make(30_000, JST);
    let h = make(50_000, -8 * 3600);
    let k = make(45_000, JST);
    let e = make(-1, JST); // the minute before
    let f = make(60_000, JST); // the minute after
    assert_eq!(store.due_count(&bucket).await.unwrap(), 0);
    for r in [&a, &b, &b2, &c, &g, &h, &k, &e, &f] {
        create(&store, r, now).await;
    }
    assert_eq!(b.scheduled_at.due_minute(), bucket);
    assert_ne!(e.scheduled_at.due_minute(), bucket);
    assert_ne!(f.scheduled_at.due_minute(), bucket);
    assert_eq!(
        store.due_count(&bucket).await.unwrap(),
        7,
        "made for the minute"
    );

    assert_eq!(try_cancel(&store, &k.device_id, now).await, Ok(()));
    assert_eq!(
        store.due_count(&bucket).await.unwrap(),
        7,
        "a cancel does not count down"
    );
    assert!(claim(&store, &c, c.scheduled_at.utc()).await);
    assert!(claim(&store, &h, h.scheduled_at.utc()).await);

    let due =
        |rs: &[&Reservation]| -> Vec<DueCall> { rs.iter().map(|r| DueCall::from(*r)).collect() };
    let listed = store.due_calls(&bucket, 0).await.expect("due");
    assert_eq!(
        listed,
        due(&[&b2, &b, &c, &g, &a, &h]),
        "scheduled and claimed, in order, with what a push needs"
    );

    // Finished ones leave the bucket.
    let later = minute + secs(55);
    assert!(finish(&store, &g, Outcome::Missed, later + GRACE).await);
    assert!(finish(&store, &h, Outcome::Sent, h.scheduled_at.utc() + secs(1)).await);
    let listed = store.due_calls(&bucket, 0).await.expect("due");
    assert_eq!(listed, due(&[&b2, &b, &c, &a]), "terminal ones vanish");

    // The neighbouring minutes hold only their own; a shard past the count holds nothing.
    let before = minute_bucket(minute - secs(1));
    assert_eq!(store.due_calls(&before, 0).await.unwrap(), due(&[&e]));
    let after = minute_bucket(minute + secs(60));
    assert_eq!(store.due_calls(&after, 0).await.unwrap(), due(&[&f]));
    let empty = minute_bucket(minute + Duration::minutes(2));
    assert_eq!(store.due_calls(&empty, 0).await.unwrap(), vec![]);
    assert_eq!(store.due_count(&empty).await.unwrap(), 0);
    assert_eq!(store.due_calls(&bucket, 1).await.unwrap(), vec![]);
}

async fn a_busy_minute_spreads_over_shards_that_together_list_each_call_once(store: DynStore) {
    let minute = Utc.with_ymd_and_hms(2035, 1, 1, 0, 0, 0).unwrap()
        + Duration::minutes(fastrand::i64(0..500_000));
    let now = minute - Duration::minutes(5);
    let bucket = minute_bucket(minute);
    let made = 2 * CALLS_PER_SHARD as usize + 28;
    let mut all = std::collections::BTreeSet::new();
    let creates = (0..made).map(|i| {
        let store = store.clone();
        let lead = Duration::minutes(5) + Duration::milliseconds((i * 97 % 60_000) as i64);
        let r = Reservation::new(new_device_id(), scheduled_at(now, lead, JST), None, now);
        all.insert(r.call_id.as_str().to_owned());
        async move { create(&store, &r, now).await }
    });
    // In batches, as many apps would; of 16, so that the last 28 creates (the count read at
    // 64 or more) spread over three shards (none in the third: (2/3)^28, about 1 in 85,000).
    let creates: Vec<_> = creates.collect();
    let mut creates = creates.into_iter();
    loop {
        let batch: Vec<_> = creates.by_ref().take(16).collect();
        if batch.is_empty() {
            break;
        }
        futures_util::future::join_all(batch).await;
    }
    let count = store.due_count(&bucket).await.unwrap();
    assert!(count as usize >= made, "{count}");
    let shards = shards_for(count);
    assert_eq!(shards, 3, "{made} made, {CALLS_PER_SHARD} a shard");
    let mut listed = Vec::new();
    for shard in 0..shards {
        let calls = store.due_calls(&bucket, shard).await.unwrap();
        assert!(!calls.is_empty(), "shard {shard} holds some");
        assert!(
            calls.is_sorted_by_key(|c| c.scheduled_at.utc()),
            "in time order"
        );
        listed.extend(calls.into_iter().map(|c| c.call_id.as_str().to_owned()));
    }
    assert_eq!(listed.len(), made, "each call once");
    assert_eq!(
        listed
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>(),
        all
    );
}

contract_suite!(
    due_calls_list_scheduled_and_claimed_of_that_minute_in_time_order,
    a_busy_minute_spreads_over_shards_that_together_list_each_call_once,
);
