//! The outcomes of a delivery's steps, and how each is counted into the run's [`RunReport`].

use chrono::{DateTime, Utc};

use super::run_report::RunReport;
use crate::domain::device::Device;
use crate::domain::due::DueCall;
use crate::push::PushError;
use crate::store::StoreError;

/// Whether a delivery left its call for a later selection (of this process's runs too).
pub(super) enum Again {
    /// Finished here: sent, failed or missed.
    No,
    /// Not finished here: its claim given back, refused (another run has it, and may die), or
    /// a step that got no answer in time.
    Later,
    /// Pushed, and due again (this call, at its `due_at`) after this run's window: handed over
    /// to the process's other runs (`InFlight`), and found by later runs' selections.
    HandOver(DueCall),
}

/// How one push of a delivery ended: finished for this run, or due again at a time (its
/// device confirms its calls and has not confirmed yet), with how many of its pushes left.
pub(super) enum Delivered {
    Done(Again),
    DueAgain(DateTime<Utc>, u32),
}

/// A step's outcome as the run's report counts it.
pub(super) trait Counted {
    fn count(&self, t: &mut RunReport);
}

/// Step 1: the device (its token), read ahead of the claim.
pub(super) enum DeviceRead {
    /// `None`: no longer registered (the call fails once claimed).
    Read(Option<Device>),
    /// Not claimed: still `scheduled`, so an overlapping or later run sends it.
    StoreError,
}

/// Step 2: the claim, `claim_lead` before the second.
pub(super) enum Claim {
    /// `pushes`: how many pushes of the call left before this claim.
    Won {
        claimed_at: DateTime<Utc>,
        pushes: u32,
    },
    /// Refused on a claim abandoned after its push started, to a device that confirms its
    /// calls: that push counted (it may have left) and the call is due again, at once.
    PushedBefore(Delivered),
    /// Refused: cancelled, or another run has it.
    Lost,
    StoreError,
    /// Too late to ring by then (only if this run fell far behind): marked `missed` instead.
    TooLate(Missed),
    /// Refused on a call that ended, its missed-call notice released for a later run
    /// (`notice::released_notice`, with the notice's reason): the notice is sent alone.
    ReleasedNotice(&'static str),
    /// Refused on a claim abandoned after its push had started: recorded `failed`.
    PushUnknown(Record),
}

/// Step 3: the push, at the second.
pub(super) enum Push {
    /// Not pushed: the mark could not be resolved, or the push not started, while the claim
    /// was surely this run's. The claim given back (`Ok(true)`: `scheduled` again, a later selection sends it), found no
    /// longer this run's (`Ok(false)`), or left to a later run (`Err`: the store did not
    /// answer).
    GivenBack(Result<bool, StoreError>),
    /// The claim is no longer this run's (another run took it over): not pushed.
    Unmarked,
    /// Pushed, or given up on.
    Ended(Pushed),
}

/// How a claimed call's push ended.
pub(super) enum Pushed {
    /// Accepted by APNs at `sent_at`, `late_ms` after it was due; `again`: a push again of a
    /// call whose device had not confirmed the earlier one.
    Sent {
        late_ms: i64,
        attempts: u32,
        sent_at: DateTime<Utc>,
        again: bool,
    },
    NotSent {
        error: PushError,
        attempts: u32,
        device: Device,
    },
    /// The device is no longer registered: nothing to push to.
    NoDevice,
}

/// Step 4: the push's outcome, recorded on the reservation.
pub(super) enum Record {
    Sent(Recorded),
    /// Every push of a call to a device that confirms its calls left, none confirmed.
    Unconfirmed(Recorded),
    /// The push may have left and nothing says whether it did: a claim found abandoned after
    /// its push had started, or this run's push that got no answer after it was sent. Recorded
    /// `failed`, never pushed (again).
    PushUnknown(Recorded),
    /// APNs refused the push for a cause of ours (5xx after the retries, a bad provider key,
    /// another 4xx).
    Failed(Recorded),
    /// The device is dead: APNs called its token invalid (`token`: what became of it), or its
    /// record is gone (`None`). Recorded `failed`, and counted apart as the app's state.
    DeadToken {
        token: Option<TokenRemoval>,
        recorded: Recorded,
    },
}

/// A reservation marked `missed`, without a push.
pub(super) struct Missed(pub(super) Recorded);

/// How an outcome's write (`finish_reservation`) went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recorded {
    Written,
    /// The record had changed meanwhile: nothing written.
    Changed,
    /// The write failed (a later run may send it again).
    StoreError,
}

/// What became of a token APNs called invalid.
pub(super) enum TokenRemoval {
    Removed,
    /// A newer token was registered meanwhile: kept.
    Kept,
    StoreError,
}

impl Recorded {
    /// Counts `written` if the outcome was written, a store error if the write failed.
    fn count_as(self, t: &mut RunReport, written: impl FnOnce(&mut RunReport)) {
        match self {
            Recorded::Written => written(t),
            Recorded::Changed => {}
            Recorded::StoreError => t.store_errors += 1,
        }
    }
}

impl Counted for DeviceRead {
    fn count(&self, t: &mut RunReport) {
        match self {
            DeviceRead::Read(_) => {}
            DeviceRead::StoreError => t.store_errors += 1,
        }
    }
}

impl Counted for Claim {
    fn count(&self, t: &mut RunReport) {
        match self {
            Claim::Won { .. } => t.claimed += 1,
            Claim::Lost => t.lost += 1,
            Claim::StoreError => t.store_errors += 1,
            Claim::TooLate(missed) => missed.count(t),
            Claim::PushedBefore(_) | Claim::ReleasedNotice(_) => {}
            Claim::PushUnknown(record) => record.count(t),
        }
    }
}

impl Counted for Push {
    fn count(&self, t: &mut RunReport) {
        match self {
            Push::GivenBack(given_back) => given_back_count(given_back, t),
            Push::Unmarked => t.lost += 1,
            // Counted as sent even if recording it fails: the push went out.
            Push::Ended(Pushed::Sent { late_ms, again, .. }) => {
                t.sent += 1;
                t.re_pushed += u32::from(*again);
                t.lateness_ms.push(*late_ms);
            }
            Push::Ended(Pushed::NotSent { .. } | Pushed::NoDevice) => {}
        }
    }
}

/// A claim given back: `scheduled` again (released), found no longer this run's (lost), or left
/// to a later run (abandoned).
fn given_back_count(given_back: &Result<bool, StoreError>, t: &mut RunReport) {
    match given_back {
        Ok(true) => t.released += 1,
        Ok(false) => t.lost += 1,
        Err(_) => t.abandoned += 1,
    }
}

impl Counted for Record {
    fn count(&self, t: &mut RunReport) {
        match self {
            Record::Sent(recorded) => recorded.count_as(t, |_| {}),
            Record::Unconfirmed(recorded) => recorded.count_as(t, |t| t.unconfirmed += 1),
            Record::PushUnknown(recorded) => recorded.count_as(t, |t| {
                t.failed += 1;
                t.push_unknown += 1;
            }),
            Record::Failed(recorded) => recorded.count_as(t, |t| t.failed += 1),
            Record::DeadToken { token, recorded } => {
                match token {
                    Some(TokenRemoval::Removed) => t.tokens_removed += 1,
                    Some(TokenRemoval::StoreError) => t.store_errors += 1,
                    Some(TokenRemoval::Kept) | None => {}
                }
                recorded.count_as(t, |t| {
                    t.failed += 1;
                    t.dead_tokens += 1;
                });
            }
        }
    }
}

impl Counted for Missed {
    fn count(&self, t: &mut RunReport) {
        self.0.count_as(t, |t| t.missed += 1);
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn counted(outcomes: &[&dyn Counted]) -> RunReport {
        let mut t = RunReport::default();
        for outcome in outcomes {
            outcome.count(&mut t);
        }
        t
    }

    #[test]
    fn each_way_a_delivery_ends_is_counted_once_as_the_report_says() {
        let read = DeviceRead::Read(None);
        let won = Claim::Won {
            claimed_at: DateTime::UNIX_EPOCH,
            pushes: 0,
        };
        let sent = || {
            Push::Ended(Pushed::Sent {
                late_ms: 12,
                attempts: 1,
                sent_at: Utc::now(),
                again: false,
            })
        };
        let sent_report = RunReport {
            claimed: 1,
            sent: 1,
            lateness_ms: vec![12],
            ..RunReport::default()
        };
        assert_eq!(
            counted(&[&read, &won, &sent(), &Record::Sent(Recorded::Written)]),
            sent_report
        );
        assert_eq!(
            counted(&[&read, &won, &sent(), &Record::Sent(Recorded::Changed)]),
            sent_report
        );
        assert_eq!(
            counted(&[&read, &won, &sent(), &Record::Sent(Recorded::StoreError)]),
            RunReport {
                store_errors: 1,
                ..sent_report.clone()
            },
            "a push that went out but was not recorded is sent and a store error"
        );

        let not_sent = Push::Ended(Pushed::NoDevice);
        let dead = |token, recorded| Record::DeadToken { token, recorded };
        assert_eq!(
            counted(&[
                &read,
                &won,
                &not_sent,
                &dead(Some(TokenRemoval::Removed), Recorded::Written)
            ]),
            RunReport {
                claimed: 1,
                tokens_removed: 1,
                failed: 1,
                dead_tokens: 1,
                ..RunReport::default()
            },
            "a dead token: failed, and counted apart"
        );
        assert_eq!(
            counted(&[&dead(Some(TokenRemoval::Kept), Recorded::Changed)]),
            RunReport::default()
        );
        assert_eq!(
            counted(&[&dead(Some(TokenRemoval::StoreError), Recorded::StoreError)]),
            RunReport {
                store_errors: 2,
                ..RunReport::default()
            }
        );
        assert_eq!(
            counted(&[&dead(None, Recorded::Written)]),
            RunReport {
                failed: 1,
                dead_tokens: 1,
                ..RunReport::default()
            },
            "a device whose record is gone: a dead token"
        );
        assert_eq!(
            counted(&[&Record::Failed(Recorded::Written)]),
            RunReport {
                failed: 1,
                ..RunReport::default()
            },
            "APNs refused the push for a cause of ours: failed, not a dead token"
        );
        assert_eq!(
            counted(&[&Record::Failed(Recorded::StoreError)]),
            RunReport {
                store_errors: 1,
                ..RunReport::default()
            }
        );

        assert_eq!(
            counted(&[&read, &won, &Push::GivenBack(Ok(true))]),
            RunReport {
                claimed: 1,
                released: 1,
                ..RunReport::default()
            },
            "a claim whose mark was not resolved in time, given back: released"
        );
        assert_eq!(
            counted(&[&read, &won, &Push::GivenBack(Err(StoreError::new("down")))]),
            RunReport {
                claimed: 1,
                abandoned: 1,
                ..RunReport::default()
            },
            "a claim that could not even be given back: abandoned to a later run"
        );
        for unmarked in [Push::Unmarked, Push::GivenBack(Ok(false))] {
            assert_eq!(
                counted(&[&read, &won, &unmarked]),
                RunReport {
                    claimed: 1,
                    lost: 1,
                    ..RunReport::default()
                },
                "a push whose claim was no longer this run's: lost"
            );
        }
        assert_eq!(
            counted(&[&Claim::PushUnknown(Record::PushUnknown(Recorded::Written))]),
            RunReport {
                failed: 1,
                push_unknown: 1,
                ..RunReport::default()
            },
            "an abandoned claim whose push had started: failed, and counted as push unknown"
        );
        assert_eq!(
            counted(&[&read, &Claim::Lost]),
            RunReport {
                lost: 1,
                ..RunReport::default()
            }
        );
        assert_eq!(
            counted(&[&read, &Claim::StoreError]),
            RunReport {
                store_errors: 1,
                ..RunReport::default()
            }
        );
        assert_eq!(
            counted(&[&DeviceRead::StoreError]),
            RunReport {
                store_errors: 1,
                ..RunReport::default()
            }
        );
        assert_eq!(
            counted(&[&read, &Claim::TooLate(Missed(Recorded::Written))]),
            RunReport {
                missed: 1,
                ..RunReport::default()
            }
        );
        assert_eq!(counted(&[&Missed(Recorded::Changed)]), RunReport::default());
        assert_eq!(
            counted(&[&Missed(Recorded::StoreError)]),
            RunReport {
                store_errors: 1,
                ..RunReport::default()
            }
        );
    }
}
