//! One run's state, shared by the tasks of its deliveries: settings, token, limits and report.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio::sync::{OnceCell, Semaphore, SemaphorePermit};

use super::dispatcher::Dispatcher;
use super::plan::{Slots, longest_claim_lead};
use super::run_report::{RunCause, RunReport};
use super::step_outcomes::Counted;
use super::store_gate::Pass;
use super::timing::{MARK_LEAD, RESOLVE_BUDGET};
use crate::domain::due::DueCall;
use crate::domain::reservation::RunToken;
use crate::platform::clock::Clock;
use crate::store::{BatchFence, PUSH_AGAIN_CLAIM_LEAD};

pub(super) fn chrono_duration(d: std::time::Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).expect("configured durations are small")
}

/// A batch mark's answer, shared by the batch's pushes: whether it stands, once answered.
type MarkAnswer = Arc<OnceCell<Option<bool>>>;

/// One run's batches (`batch.rs`): its own marks, and what it found fencing others'.
#[derive(Default)]
pub(super) struct Batches {
    /// Batch (its start) → its mark's answer.
    pub(super) marks: Mutex<HashMap<DateTime<Utc>, MarkAnswer>>,
    /// (claimant, batch) → what the fence found: one fence a batch, whatever its size.
    pub(super) fences: Mutex<HashMap<(RunToken, DateTime<Utc>), BatchFence>>,
}

pub(super) struct Run {
    pub(super) dispatcher: Dispatcher,
    /// Carried by every write this run makes on a reservation.
    pub(super) token: RunToken,
    pub(super) grace: chrono::Duration,
    pub(super) claim_timeout: chrono::Duration,
    pub(super) claim_lead: chrono::Duration,
    pub(super) push_budget: chrono::Duration,
    /// How long a push to a device that confirms its calls waits for the confirmation.
    pub(super) confirm_wait: chrono::Duration,
    /// The most pushes of one call to such a device.
    pub(super) max_pushes: u32,
    pub(super) end: DateTime<Utc>,
    pub(super) started: DateTime<Utc>,
    /// How many processes share the tables' throughput with this run (the parts of a split
    /// minute): its share of the write plan.
    pub(super) parts: u32,
    /// Its batch marks, and the fences it put on stopped runs' batches.
    pub(super) batches: Batches,
    limit: Semaphore,
    report: Mutex<RunReport>,
}

impl Run {
    pub(super) fn new(dispatcher: Dispatcher, cause: RunCause, started: DateTime<Utc>) -> Run {
        let s = dispatcher.settings();
        Run {
            token: RunToken::generate(),
            grace: chrono_duration(s.grace),
            claim_timeout: chrono_duration(s.claim_timeout),
            claim_lead: chrono_duration(s.claim_lead),
            push_budget: chrono_duration(s.push_budget),
            confirm_wait: chrono_duration(s.confirm_wait),
            max_pushes: s.max_pushes,
            end: started + chrono_duration(s.window),
            started,
            parts: 1,
            batches: Batches::default(),
            limit: Semaphore::new(s.concurrency.max(1)),
            report: Mutex::new(RunReport {
                cause: cause.as_str(),
                ..RunReport::default()
            }),
            dispatcher,
        }
    }

    pub(super) fn tally(&self, update: impl FnOnce(&mut RunReport)) {
        update(&mut self.report.lock().unwrap_or_else(|p| p.into_inner()));
    }

    pub(super) fn report(&self) -> RunReport {
        self.report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(super) fn counted<O: Counted>(&self, outcome: O) -> O {
        self.tally(|t| outcome.count(t));
        outcome
    }

    pub(super) fn clock(&self) -> &dyn Clock {
        self.dispatcher.clock.as_ref()
    }

    /// A place among the deliveries' steps in flight at once (`concurrency`): store requests
    /// and pushes.
    pub(super) async fn permit(&self) -> SemaphorePermit<'_> {
        self.limit
            .acquire()
            .await
            .expect("the semaphore is never closed")
    }

    /// A place among the process's store requests in flight at once (`store_gate`): taken for
    /// one attempt, so a request waits for its turn here rather than inside its timeout. Taken
    /// after a step's [`Run::permit`], never before one.
    pub(super) async fn store_permit(&self) -> Pass<'_> {
        self.dispatcher.store_gate.enter().await
    }

    /// [`Run::store_permit`] for a request that can wait (an outcome, a notice's): after every
    /// request waiting that must be done before its second.
    pub(super) async fn store_permit_after(&self) -> Pass<'_> {
        self.dispatcher.store_gate.enter_after().await
    }

    pub(super) fn device_hash(&self, r: &DueCall) -> String {
        r.device_id.log_hash(&self.dispatcher.salt)
    }

    /// When the delivery of `r`'s next push (due at `r.due_at`) makes its writes (`plan`): its
    /// claim never so early that its push could come after half the claim timeout (`may_push`
    /// would give it back), with the push budget and a second to spare, and a push again's
    /// never earlier than the store takes it ([`PUSH_AGAIN_CLAIM_LEAD`]).
    pub(super) fn slots(&self, r: &DueCall) -> Slots {
        let now = self.clock().now();
        self.dispatcher.plan.plan(
            r.due_at,
            now,
            self.claim_lead,
            self.longest_lead(r),
            self.parts,
        )
    }

    /// When the push mark of `r`'s next push is made, if it is a write of its own (a device
    /// that confirms its calls): `MARK_LEAD` before it, or earlier in a crowded second (`plan`).
    pub(super) fn mark_slot(&self, r: &DueCall) -> DateTime<Utc> {
        let now = self.clock().now();
        let leads = (MARK_LEAD, self.longest_lead(r));
        self.dispatcher.plan.mark(r.due_at, now, leads, self.parts)
    }

    fn longest_lead(&self, r: &DueCall) -> chrono::Duration {
        let longest = longest_claim_lead(self.claim_timeout, self.push_budget);
        if r.due_at > r.scheduled_at.utc() {
            return longest.min(PUSH_AGAIN_CLAIM_LEAD);
        }
        longest
    }

    /// Until when the call's device read, claim and push mark are made again when they get no
    /// answer: [`RESOLVE_BUDGET`] past its second, or past this run's start for a call already
    /// due then (one a killed run left: a crowd of them meets the store's throughput at once),
    /// never past grace.
    pub(super) fn resolve_deadline(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        (at.max(self.started) + chrono_duration(RESOLVE_BUDGET)).min(at + self.grace)
    }
}
