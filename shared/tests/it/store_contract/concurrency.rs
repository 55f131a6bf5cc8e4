//! Races between runs and clients: cancel against claim, concurrent creates for one device.

use std::collections::HashSet;
use std::sync::Arc;

use koe::domain::reservation::{CallId, Reservation, ReservationStatus};
use koe::store::{CancelError, CreateError, Created};
use tokio::sync::Barrier;

use super::{
    DynStore, LEAD, abandoned_before, create, get, new_device_id, new_runs_claim, reservation,
    secs, t0, try_cancel, try_create,
};

async fn cancel_and_claim_race_has_exactly_one_winner(store: DynStore, trials: usize) {
    let (mut cancel_won, mut claim_won) = (0usize, 0usize);
    for trial in 0..trials {
        let id = new_device_id();
        let r = reservation(&id, t0(), LEAD);
        create(&store, &r, t0()).await;
        let now = r.scheduled_at.utc();
        let barrier = Arc::new(Barrier::new(2));
        let cancel_task = {
            let (store, id, barrier) = (store.clone(), id.clone(), barrier.clone());
            async move {
                barrier.wait().await;
                try_cancel(&store, &id, now).await
            }
        };
        let claim_task = {
            let (store, r, barrier) = (store.clone(), r.clone(), barrier.clone());
            async move {
                barrier.wait().await;
                new_runs_claim(
                    &store,
                    (&r.device_id, &r.call_id),
                    now,
                    abandoned_before(now),
                )
                .await
            }
        };
        // Alternate which one is spawned first, so both get a head start now and then.
        let (cancel, claim) = if trial % 2 == 0 {
            let cancel = tokio::spawn(cancel_task);
            (cancel, tokio::spawn(claim_task))
        } else {
            let claim = tokio::spawn(claim_task);
            (tokio::spawn(cancel_task), claim)
        };
        let cancel = cancel.await.expect("cancel task");
        let claimed = claim.await.expect("claim task");
        let after = get(&store, &id, now).await;
        match (&cancel, claimed) {
            (Ok(()), false) => {
                assert_eq!(
                    after, None,
                    "trial {trial}: cancel won, record must be gone"
                );
                cancel_won += 1;
            }
            (Err(CancelError::TooLate(ReservationStatus::Claimed)), true) => {
                let after = after.unwrap_or_else(|| panic!("trial {trial}: claim won, no record"));
                assert_eq!(after.status, ReservationStatus::Claimed, "trial {trial}");
                assert_eq!(after.call_id, r.call_id, "trial {trial}");
                assert_eq!(after.claimed_at, Some(now), "trial {trial}");
                claim_won += 1;
            }
            _ => panic!(
                "trial {trial}: not exactly one winner: cancel {cancel:?}, claim {claimed}, record {after:?}"
            ),
        }
    }
    println!(
        "cancel vs claim over {trials} trials: cancel won {cancel_won}, claim won {claim_won}"
    );
    assert_eq!(cancel_won + claim_won, trials);
}

async fn concurrent_creates_for_one_device_have_one_winner(store: DynStore) {
    const CALLERS: usize = 20;
    let id = new_device_id();
    let now = t0();
    let candidates: Vec<Reservation> = (0..CALLERS)
        .map(|i| reservation(&id, now, LEAD + secs(i as i64)))
        .collect();
    let distinct: HashSet<&CallId> = candidates.iter().map(|r| &r.call_id).collect();
    assert_eq!(distinct.len(), CALLERS, "distinct callIds");

    let barrier = Arc::new(Barrier::new(CALLERS));
    let tasks: Vec<_> = candidates
        .iter()
        .cloned()
        .map(|r| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let result = try_create(&store, &r, now).await;
                (r, result)
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut exists = 0;
    for task in tasks {
        match task.await.expect("create task") {
            (r, Ok(Created::New { .. })) => winners.push(r),
            (_, Err(CreateError::Exists)) => exists += 1,
            (r, other) => panic!("create {}: {other:?}", r.call_id.as_str()),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one create wins");
    assert_eq!(exists, CALLERS - 1, "the others get Exists");
    let winner = winners.pop().unwrap();
    assert_eq!(
        get(&store, &id, now).await,
        Some(winner),
        "the winner is stored"
    );
}

// The race takes its trials per adapter (fewer on DynamoDB Local), so the two modules that
// `contract_suite!` would make are written out here.

mod memory {
    on_each_store!(@store koe::store::memory::MemoryStore::new();
        ; threads 4: concurrent_creates_for_one_device_have_one_winner);

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn cancel_and_claim_race_has_exactly_one_winner() {
        super::cancel_and_claim_race_has_exactly_one_winner(store().await, 100).await;
    }
}

/// DynamoDB Local (testkit's, started once per test process), fresh tables from `template.yaml` per test.
mod dynamodb {
    on_each_store!(@store koe_testkit::dynamodb::fresh_store().await;
        ; threads 4: concurrent_creates_for_one_device_have_one_winner);

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn cancel_and_claim_race_has_exactly_one_winner() {
        super::cancel_and_claim_race_has_exactly_one_winner(store().await, 30).await;
    }
}
