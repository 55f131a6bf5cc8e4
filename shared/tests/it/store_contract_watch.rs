//! The `Store` contract for a minute's watch (held against both adapters): a run's promise
//! only ever raises it, and of creates that claim a wake for seconds it does not reach, the
//! first claims it and raises it to the woken run's stay, the others find it claimed; the
//! claimant asking again (after a lost reply) is answered as claimed.

use chrono::Duration;
use koe::domain::reservation::minute_bucket;

use super::store_contract::{DynStore, secs, t0};

fn at(n: i64) -> chrono::DateTime<chrono::Utc> {
    t0() + secs(n)
}

/// Whether `claimant`'s wake of `minute` for second `due` (running until second `until`) is
/// claimed by it.
async fn claims(store: &DynStore, minute: &str, due: i64, until: i64, claimant: &str) -> bool {
    let claim = store.claim_wake(minute, at(due), at(until), claimant);
    claim.await.expect("claim_wake")
}

async fn a_watch_is_only_raised_and_a_wake_claimed_once(store: DynStore) {
    let minute = minute_bucket(t0());
    // No watch: a wake for any second is claimed, raising the watch to the woken run's stay.
    assert!(claims(&store, &minute, 30, 75, "create-1").await);
    // Claimed: seconds up to the stay find it so; a later one claims it again.
    assert!(!claims(&store, &minute, 50, 75, "create-2").await);
    assert!(!claims(&store, &minute, 75, 80, "create-3").await);
    assert!(claims(&store, &minute, 76, 80, "create-4").await);
    // The claimant asking again (its reply was lost) is answered as claimed; no one else is.
    assert!(claims(&store, &minute, 76, 80, "create-4").await);
    assert!(!claims(&store, &minute, 76, 80, "create-2").await);
    // A run's promise never lowers it; a later one raises it, and its claimant's claim is over.
    store.watch_minute(&minute, at(40)).await.unwrap();
    assert!(!claims(&store, &minute, 80, 90, "create-5").await);
    store.watch_minute(&minute, at(95)).await.unwrap();
    assert!(
        !claims(&store, &minute, 76, 80, "create-4").await,
        "a promise beyond the claim ends it"
    );
    assert!(!claims(&store, &minute, 95, 99, "create-6").await);
    assert!(claims(&store, &minute, 96, 99, "create-7").await);
    assert!(
        !claims(&store, &minute, 76, 80, "create-4").await,
        "superseded"
    );
    // Another minute has a watch of its own.
    let next = minute_bucket(t0() + Duration::minutes(1));
    assert!(claims(&store, &next, 70, 75, "create-8").await);
}

async fn of_creates_at_once_one_claims_the_wake(store: DynStore) {
    let minute = minute_bucket(t0());
    let names: Vec<String> = (0..16).map(|i| format!("burst-{i}")).collect();
    let claims = futures_util::future::join_all(
        (0..16).map(|i| store.claim_wake(&minute, at(20 + i), at(75), &names[i as usize])),
    )
    .await;
    let won = claims.into_iter().filter(|c| *c.as_ref().unwrap()).count();
    assert_eq!(won, 1);
}

on_each_store!(
    a_watch_is_only_raised_and_a_wake_claimed_once;
    multi_thread: of_creates_at_once_one_claims_the_wake,
);
