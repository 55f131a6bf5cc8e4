//! Calls to a device that confirms its call pushes (`confirmsCalls`): each push that left counts
//! and makes the call due again at the end of the confirmation wait, in the same bucket-index
//! entry, so whichever run selects it then pushes it again (`attempt` + 1) unless the device
//! confirmed first; after the last push (or past grace) its wait's end records `unconfirmed`.
//!
//! Exactly once per attempt: each attempt is a claim, a push mark and an outcome like a first
//! push, with this run's token; a confirmation stored before an attempt's mark makes the mark
//! refused (no push), and one that meets a marked attempt is held back by the store until the
//! attempt's outcome is written (`ConfirmAnswer::PushInFlight`).

use chrono::{DateTime, Utc};

use super::plan::Slots;
use super::run_state::Run;
use super::step_outcomes::{Again, Delivered};
use super::step_outcomes::{Record, Recorded};
use crate::domain::due::DueCall;
use crate::store::Outcome;

/// How long past its window a run stays for the wait after a call's last push, to record it
/// `unconfirmed` when the wait ends (`Run::deliver`); a wait that ends later is handed over, as
/// a push again is. The dispatch functions' timeouts cover it (`app::budgets`).
pub const LAST_WAIT_STAY: chrono::Duration = chrono::Duration::seconds(30);

impl Run {
    /// Delivers a reservation: one push, and for a device that confirms its calls each push
    /// again this run's window still covers; one due after it is handed over to a later run.
    pub(super) async fn deliver(&self, r: &DueCall, slots: Slots) -> Again {
        let mut call = r.clone();
        let mut slots = slots;
        loop {
            match self.deliver_once(&call, slots).await {
                Delivered::Done(again) => return again,
                Delivered::DueAgain(next, pushes) => {
                    call.due_at = next;
                    // After its last push the wait only ends in `unconfirmed`: this run stays
                    // for it (up to `LAST_WAIT_STAY` past its window), so that is recorded when
                    // the wait ends, not by the schedule's next run up to a minute later.
                    let last = !self.may_push_again_at(&call, pushes, next);
                    let stays = last && next <= self.end + LAST_WAIT_STAY;
                    if next >= self.end && !stays {
                        // Not finished: this process's runs may take it at once (`InFlight`).
                        return Again::HandOver(call);
                    }
                    slots = self.slots(&call);
                }
            }
        }
    }

    /// Whether a call whose `pushes` left (none confirmed yet) may be pushed once more now:
    /// fewer than `max_pushes`, and inside the grace period after its reserved second.
    pub(super) fn may_push_again(&self, r: &DueCall, pushes: u32) -> bool {
        self.may_push_again_at(r, pushes, self.clock().now())
    }

    /// [`Run::may_push_again`] at `at`.
    fn may_push_again_at(&self, r: &DueCall, pushes: u32, at: DateTime<Utc>) -> bool {
        pushes < self.max_pushes && at <= r.scheduled_at.utc() + self.grace
    }

    /// A push to a device that confirms its calls left at `sent_at` (`pushes` before it): it
    /// counts, and the call is due again at the end of the wait (then pushed again, or recorded
    /// `unconfirmed` after the last). Refused when the device confirmed meanwhile: done.
    pub(super) async fn record_pushed(
        &self,
        r: &DueCall,
        sent_at: DateTime<Utc>,
        pushes: u32,
    ) -> (Record, Delivered) {
        let next_at = sent_at + self.confirm_wait;
        let outcome = Outcome::Pushed {
            next_at,
            pushes: pushes + 1,
        };
        let recorded = self.finish(r, outcome).await;
        tracing::info!(
            call_id = r.call_id.as_str(),
            device = self.device_hash(r),
            outcome = "pushed",
            attempt = pushes + 1,
            late_ms = (sent_at - r.due_at).num_milliseconds(),
            "dispatch push"
        );
        let due = match recorded {
            Recorded::Written => Delivered::DueAgain(next_at, pushes + 1),
            // Confirmed (or cancelled) meanwhile; or left to a later run (store error).
            Recorded::Changed => Delivered::Done(Again::No),
            Recorded::StoreError => Delivered::Done(Again::Later),
        };
        (Record::Sent(recorded), due)
    }

    /// A claim found abandoned after its push started, to a device that confirms its calls:
    /// that push may have left, so it counts (`pushes` before it), and the call is due again at
    /// once: pushed again by this run, within grace.
    pub(super) async fn count_abandoned_push(&self, r: &DueCall, pushes: u32) -> Delivered {
        let now = self.clock().now();
        let outcome = Outcome::Pushed {
            next_at: now,
            pushes: pushes + 1,
        };
        match self.finish(r, outcome).await {
            Recorded::Written => {
                tracing::warn!(
                    call_id = r.call_id.as_str(),
                    device = self.device_hash(r),
                    attempt = pushes + 1,
                    "dispatch push of a run that stopped counted as left; pushed again"
                );
                Delivered::DueAgain(now, pushes + 1)
            }
            Recorded::Changed => Delivered::Done(Again::No),
            Recorded::StoreError => Delivered::Done(Again::Later),
        }
    }

    /// Every push left and none was confirmed by the end of the last wait (or grace ended).
    pub(super) async fn record_unconfirmed(&self, r: &DueCall) -> Record {
        let recorded = self.finish(r, Outcome::Unconfirmed).await;
        if recorded == Recorded::Written {
            tracing::warn!(
                call_id = r.call_id.as_str(),
                device = self.device_hash(r),
                outcome = "unconfirmed",
                "dispatch push"
            );
            self.notice(r, "unconfirmed", None).await;
        }
        Record::Unconfirmed(recorded)
    }
}
