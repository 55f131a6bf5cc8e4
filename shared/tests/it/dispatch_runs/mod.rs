//! The dispatcher against both store adapters (memory, and DynamoDB Local via
//! `koe_testkit::dynamodb::fresh_store`), in the manual-clock [`World`] of `dispatch_world`.
//! Runs use the
//! production timing from `Config` (70 s window, 5 s re-selection, 500 ms claim lead, 1 s push
//! budget, 120 s grace, 30 s claim timeout), so no test waits in real time for any of it.
//!
//! Each behaviour is an adapter-agnostic `async fn name(store)`; `dispatch_suite!` runs all of
//! them once per adapter.

mod apns_answers;
mod exactly_once;
mod on_time;

use apns_answers::{
    a_429_then_success_within_the_budget_is_sent,
    a_push_apns_may_have_read_is_never_sent_again_one_it_refused_is_retried,
    an_invalid_token_removes_the_device_and_fails_the_call,
    server_errors_past_the_budget_and_a_hung_push_fail,
};
use exactly_once::{
    a_cancel_racing_the_claim_either_wins_or_gets_too_late_never_both,
    a_run_that_died_after_claiming_in_its_batch_leaves_it_to_the_next_run,
    a_run_that_died_after_its_batch_mark_leaves_it_failed_never_pushed,
    a_run_that_died_after_starting_the_push_leaves_it_failed_never_pushed_again,
    claims_in_batches_found_past_grace_end_by_their_marks,
    duplicate_and_overlapping_runs_push_once,
    overlapping_runs_of_one_process_leave_each_others_calls_alone,
};
use on_time::{
    a_reservation_made_mid_run_still_leaves_on_time,
    overdue_within_grace_is_sent_at_once_and_beyond_grace_is_missed,
    pushes_leave_at_their_second_and_never_early,
};

// ---------------------------------------------------------------------------------------------
// One instantiation per adapter

macro_rules! dispatch_suite {
    (store: $store:expr, race_per_round: $per_round:expr $(,)?) => {
        use std::sync::Arc;

        use koe::store::prelude::*;

        async fn store() -> Arc<dyn Store> {
            Arc::new($store)
        }

        dispatch_suite!(@tests
            pushes_leave_at_their_second_and_never_early,
            a_reservation_made_mid_run_still_leaves_on_time,
            duplicate_and_overlapping_runs_push_once,
            overlapping_runs_of_one_process_leave_each_others_calls_alone,
            a_run_that_died_after_claiming_in_its_batch_leaves_it_to_the_next_run,
            a_run_that_died_after_its_batch_mark_leaves_it_failed_never_pushed,
            claims_in_batches_found_past_grace_end_by_their_marks,
            a_run_that_died_after_starting_the_push_leaves_it_failed_never_pushed_again,
            an_invalid_token_removes_the_device_and_fails_the_call,
            a_429_then_success_within_the_budget_is_sent,
            server_errors_past_the_budget_and_a_hung_push_fail,
            a_push_apns_may_have_read_is_never_sent_again_one_it_refused_is_retried,
            overdue_within_grace_is_sent_at_once_and_beyond_grace_is_missed,
        );

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_cancel_racing_the_claim_either_wins_or_gets_too_late_never_both() {
            super::a_cancel_racing_the_claim_either_wins_or_gets_too_late_never_both(
                store().await,
                $per_round,
            )
            .await;
        }
    };
    (@tests $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name(store().await).await;
            }
        )*
    };
}

mod memory {
    dispatch_suite!(
        store: koe::store::memory::MemoryStore::new(),
        race_per_round: 20,
    );
}

/// DynamoDB Local (testkit's, started once per test process), fresh tables from `template.yaml` per test.
mod dynamodb {
    dispatch_suite!(
        store: koe_testkit::dynamodb::fresh_store().await,
        race_per_round: 8,
    );
}
