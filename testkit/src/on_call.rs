//! [`OnCall`]: the dispatcher's store requests on one call, named by its reservation (its device
//! and call ids) rather than by both ids, for the tests that make them by hand.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use koe::domain::reservation::{Reservation, RunToken};
use koe::store::prelude::*;
use koe::store::{ClaimAnswer, ClaimMark, Outcome, StoreError};

type Time = DateTime<Utc>;

/// [`DispatchStore`]'s requests on `r`'s call, by `run`; the arguments after `r` are the
/// request's own, in its order.
#[async_trait]
pub trait OnCall: DispatchStore {
    /// [`DispatchStore::claim_due`] of `r`.
    async fn claim_due_for(
        &self,
        r: &Reservation,
        run: &RunToken,
        now: Time,
        abandoned_before: Time,
        mark: ClaimMark,
    ) -> Result<ClaimAnswer, StoreError> {
        let (id, call) = (&r.device_id, &r.call_id);
        self.claim_due(id, call, run, now, abandoned_before, mark)
            .await
    }

    /// [`DispatchStore::claim_reservation`] of `r`.
    async fn claim_for(
        &self,
        r: &Reservation,
        run: &RunToken,
        now: Time,
        abandoned_before: Time,
    ) -> Result<bool, StoreError> {
        let (id, call) = (&r.device_id, &r.call_id);
        self.claim_reservation(id, call, run, now, abandoned_before)
            .await
    }

    /// [`DispatchStore::finish_reservation`] of `r`.
    async fn finish_for(
        &self,
        r: &Reservation,
        outcome: Outcome,
        run: &RunToken,
        now: Time,
        abandoned_before: Time,
    ) -> Result<bool, StoreError> {
        let (id, call) = (&r.device_id, &r.call_id);
        self.finish_reservation(id, call, outcome, run, now, abandoned_before)
            .await
    }
}

impl<S: DispatchStore + ?Sized> OnCall for S {}
