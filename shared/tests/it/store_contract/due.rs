//! Due reservations: the time-bucket index of each minute, spread over shards.

use chrono::{Duration, TimeZone, Utc};
use koe::domain::due::{CALLS_PER_SHARD, COUNT_STEP, DueCall, shards_for};
use koe::domain::reservation::{Reservation, minute_bucket};
use koe::store::Outcome;

use crate::count_estimate::{call_id_that_counts, count_after};

use super::{
    DynStore, GRACE, JST, claim, create, finish, new_device_id, scheduled_at, secs, try_cancel,
};

async fn due_calls_list_scheduled_and_claimed_of_that_minute_in_time_order(store: DynStore) {
    // A random minute, so even shared tables hold nothing else in it.
    let minute = Utc.with_ymd_and_hms(2035, 1, 1, 0, 0, 0).unwrap()
        + Duration::minutes(fastrand::i64(0..500_000));
    let now = minute - Duration::minutes(5);
    let bucket = minute_bucket(minute);
    // Call ids that do not raise the minute's count (one in 32 does), but `k`'s.
    let make_counting = |offset_ms: i64, offset_east: i32, counts: bool| {
        let id = new_device_id();
        let lead = Duration::minutes(5) + Duration::milliseconds(offset_ms);
        let mut r = Reservation::new(
            id,
            scheduled_at(now, lead, offset_east),
            Some("Mika".into()),
            now,
        );
        r.call_id = call_id_that_counts(counts);
        r
    };
    let make = |offset_ms: i64, offset_east: i32| make_counting(offset_ms, offset_east, false);
    let a = make(40_000, JST);
    let b = make(5_250, 5 * 3600 + 1800);
    let b2 = make(5_100, 0);
    let c = make(20_000, -(3 * 3600 + 1800));
    let g = make(30_000, JST);
    let h = make(50_000, -8 * 3600);
    let k = make_counting(45_000, JST, true);
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
        COUNT_STEP,
        "made for the minute: k's call id 32, the others' nothing"
    );

    assert_eq!(try_cancel(&store, &k.device_id, now).await, Ok(()));
    assert_eq!(
        store.due_count(&bucket).await.unwrap(),
        COUNT_STEP,
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

    // The neighbouring minutes hold only their own; each call is in a shard of the count
    // before it (1 shard: k's raise to 32 came after its put), so shard 1 holds nothing.
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
    // The 2nd and the 18th call ids raise the count (by 32; one in 32 does), no other: it ends
    // at 64, three shards, as an exact count of the 92 would give.
    let mut creates = (0..made).map(|i| {
        let store = store.clone();
        let lead = Duration::minutes(5) + Duration::milliseconds((i * 97 % 60_000) as i64);
        let mut r = Reservation::new(new_device_id(), scheduled_at(now, lead, JST), None, now);
        r.call_id = call_id_that_counts(i == 1 || i == 17);
        all.insert(r.call_id.as_str().to_owned());
        async move { create(&store, &r, now).await }
    });
    // The minute's first alone, then in batches, as many apps would; of 16, so that the last
    // 59 creates (the count read at 64) spread over three shards (none in the third:
    // (2/3)^59, about 1 in 10^10).
    creates.next().unwrap().await;
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
    assert_eq!(count, 2 * COUNT_STEP);
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

/// A minute's count is an estimate: 320 creates (random call ids, the first alone, then 16 at
/// once) leave it at 32 for each whose call id counts (one in 32), so about 320, and each call
/// in a shard the count read afterwards covers.
async fn a_minutes_count_estimates_its_creates_in_steps_and_covers_every_shard(store: DynStore) {
    let minute = Utc.with_ymd_and_hms(2035, 1, 1, 0, 0, 0).unwrap()
        + Duration::minutes(fastrand::i64(0..500_000));
    let now = minute - Duration::minutes(5);
    let bucket = minute_bucket(minute);
    let made: Vec<Reservation> = (0..320)
        .map(|i| {
            let lead = Duration::minutes(5) + Duration::milliseconds(i * 181 % 60_000);
            Reservation::new(new_device_id(), scheduled_at(now, lead, JST), None, now)
        })
        .collect();
    create(&store, &made[0], now).await;
    for batch in made[1..].chunks(16) {
        futures_util::future::join_all(batch.iter().map(|r| create(&store, r, now))).await;
    }
    let count = store.due_count(&bucket).await.unwrap();
    assert_eq!(count, count_after(made.iter().map(|r| &r.call_id)));
    assert_eq!(count % COUNT_STEP, 0, "{count}: steps of 32");
    // 320 × 1/32 raises, about 10: more than 33 about once in 10^9 runs (none: 1 in 25,000).
    assert!(count <= 33 * COUNT_STEP, "{count}");
    let shards = shards_for(count);
    let mut listed = std::collections::BTreeSet::new();
    for shard in 0..shards {
        for call in store.due_calls(&bucket, shard).await.unwrap() {
            assert!(
                listed.insert(call.call_id.as_str().to_owned()),
                "listed once"
            );
        }
    }
    let all: std::collections::BTreeSet<_> =
        made.iter().map(|r| r.call_id.as_str().to_owned()).collect();
    assert_eq!(
        listed, all,
        "every call in a shard under shards_for({count})"
    );
}

contract_suite!(
    due_calls_list_scheduled_and_claimed_of_that_minute_in_time_order,
    a_busy_minute_spreads_over_shards_that_together_list_each_call_once,
    a_minutes_count_estimates_its_creates_in_steps_and_covers_every_shard,
);
