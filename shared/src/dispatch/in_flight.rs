//! The calls this process's runs hold ([`InFlight`]), one run's hold on one call ([`Held`]), and
//! the pushes again one run hands over to the others because they fall due after its window.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::domain::due::DueCall;
use crate::domain::reservation::CallId;

/// How long a call this process's runs have finished stays off limits to them: longer than a
/// selection's answer can be stale (its queries run while other runs finish calls), so that a
/// run does not take on a call another run here has just sent (only to have its claim refused).
/// A call handed over (due again after its run's window) is not finished.
const DONE_FOR: Duration = Duration::from_secs(60);

/// The calls that runs in this process have taken on and not yet finished, those finished in
/// the last [`DONE_FOR`], and the pushes again handed over. Every change is announced
/// ([`InFlight::changes`]), so a run waiting for another's call hears of it at once.
#[derive(Clone)]
pub struct InFlight(Arc<Shared>);

struct Shared {
    calls: Mutex<Calls>,
    changed: watch::Sender<u64>,
}

impl Default for InFlight {
    fn default() -> InFlight {
        InFlight(Arc::new(Shared {
            calls: Mutex::default(),
            changed: watch::channel(0).0,
        }))
    }
}

#[derive(Default)]
struct Calls {
    held: HashSet<CallId>,
    /// When each recently finished call was finished.
    done: HashMap<CallId, Instant>,
    /// Pushes again due after the window of the run that pushed, by call: for the first run
    /// here whose window covers them (`Run::take_handed_over`).
    handed: HashMap<CallId, DueCall>,
}

impl InFlight {
    fn calls(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.0.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn announce(&self) {
        self.0.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Takes the call unless a run here has it, or finished it a moment ago; the guard gives it
    /// back when dropped. A push again handed over for it is taken with it: the guard tells
    /// when it is due ([`Held::due_again`]), which a selection's answer may not show yet.
    pub(super) fn take(&self, call_id: &CallId) -> Option<Held> {
        let mut calls = self.calls();
        calls.done.retain(|_, at| at.elapsed() < DONE_FOR);
        if calls.done.contains_key(call_id) || !calls.held.insert(call_id.clone()) {
            return None;
        }
        let due_again = calls.handed.remove(call_id).map(|c| c.due_at);
        Some(Held {
            in_flight: self.clone(),
            call_id: call_id.clone(),
            due_again,
        })
    }

    /// Whether a run here holds the call.
    pub(super) fn is_held(&self, call_id: &CallId) -> bool {
        self.calls().held.contains(call_id)
    }

    /// The pushes again handed over that fall due before `end`, taken out (to be taken on).
    pub(super) fn handed_over(&self, end: DateTime<Utc>) -> Vec<DueCall> {
        let mut calls = self.calls();
        let due: Vec<CallId> = calls
            .handed
            .values()
            .filter(|c| c.due_at < end)
            .map(|c| c.call_id.clone())
            .collect();
        due.iter()
            .filter_map(|id| calls.handed.remove(id))
            .collect()
    }

    /// Announces each change: a call released, finished or handed over.
    pub(super) fn changes(&self) -> watch::Receiver<u64> {
        self.0.changed.subscribe()
    }

    /// How many calls are held (for tests).
    pub fn len(&self) -> usize {
        self.calls().held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A call held by one run: released when its task ends, however it ends.
pub(super) struct Held {
    in_flight: InFlight,
    call_id: CallId,
    /// When the push again handed over with it is due (see [`InFlight::take`]).
    pub(super) due_again: Option<DateTime<Utc>>,
}

impl Held {
    /// Releases the call as finished by this run (sent, failed or missed): the process's other
    /// runs leave it alone for a while.
    pub(super) fn finished(self) {
        let mut calls = self.in_flight.calls();
        calls.done.insert(self.call_id.clone(), Instant::now());
    }

    /// Releases the call with its push again, due after this run's window: the first of the
    /// process's runs whose window covers it takes it on (a later run's selection finds it
    /// too, from the store).
    pub(super) fn hand_over(self, call: DueCall) {
        let mut calls = self.in_flight.calls();
        calls.handed.insert(call.call_id.clone(), call);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut calls = self.in_flight.calls();
        calls.held.remove(&self.call_id);
        drop(calls);
        self.in_flight.announce();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_held_by_one_run_at_a_time_and_free_again_when_released() {
        let shared = InFlight::default();
        let other = shared.clone();
        let call = CallId::generate();
        let held = shared.take(&call).expect("free");
        assert!(other.take(&call).is_none(), "held by the first run");
        assert!(
            InFlight::default().take(&call).is_some(),
            "another process's runs know nothing of it"
        );
        drop(held);
        let again = other.take(&call).expect("free once released unfinished");
        again.finished();
        assert!(shared.is_empty());
        assert!(
            shared.take(&call).is_none(),
            "a finished call is left alone for a while"
        );
    }

    #[test]
    fn a_push_again_handed_over_is_not_finished_and_goes_with_its_due_time() {
        let shared = InFlight::default();
        let r = crate::domain::reservation::Reservation::new(
            crate::domain::device::DeviceId::parse("deviceId", "hand-over").unwrap(),
            crate::domain::reservation::ScheduledAt::from_stored(
                crate::platform::clock::utc("2026-01-01T00:01:00Z").fixed_offset(),
            ),
            None,
            crate::platform::clock::utc("2026-01-01T00:00:00Z"),
        );
        let mut call = DueCall::from(&r);
        let changes = shared.changes();
        shared.take(&call.call_id).expect("free").hand_over({
            call.due_at += chrono::Duration::seconds(5);
            call.clone()
        });
        assert!(changes.has_changed().unwrap(), "announced");
        assert!(!shared.is_held(&call.call_id));
        assert!(
            shared.handed_over(call.due_at).is_empty(),
            "not before its end"
        );
        let held = shared.take(&call.call_id).expect("not finished: free");
        assert_eq!(held.due_again, Some(call.due_at), "its push again's time");
        held.hand_over(call.clone());
        let handed = shared.handed_over(call.due_at + chrono::Duration::milliseconds(1));
        assert_eq!(handed.len(), 1);
        assert!(
            shared
                .handed_over(chrono::DateTime::<Utc>::MAX_UTC)
                .is_empty(),
            "taken once"
        );
    }
}
