//! The calls this process's runs hold ([`InFlight`]), and one run's hold on one call ([`Held`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::domain::reservation::CallId;

/// How long a call this process's runs have finished stays off limits to them: longer than a
/// selection's answer can be stale (its queries run while other runs finish calls), so that a
/// run does not take on a call another run here has just sent (only to have its claim refused).
const DONE_FOR: Duration = Duration::from_secs(60);

/// The calls that runs in this process have taken on and not yet finished, and those finished
/// in the last [`DONE_FOR`].
#[derive(Clone, Default)]
pub struct InFlight(Arc<Mutex<Calls>>);

#[derive(Default)]
struct Calls {
    held: HashSet<CallId>,
    /// When each recently finished call was finished.
    done: HashMap<CallId, Instant>,
}

impl InFlight {
    fn calls(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the call unless a run here has it, or finished it a moment ago; the guard gives it
    /// back when dropped.
    pub(super) fn take(&self, call_id: &CallId) -> Option<Held> {
        let mut calls = self.calls();
        calls.done.retain(|_, at| at.elapsed() < DONE_FOR);
        if calls.done.contains_key(call_id) {
            return None;
        }
        calls.held.insert(call_id.clone()).then(|| Held {
            in_flight: self.clone(),
            call_id: call_id.clone(),
        })
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
}

impl Held {
    /// Releases the call as finished by this run (sent, failed or missed): the process's other
    /// runs leave it alone for a while.
    pub(super) fn finished(self) {
        let mut calls = self.in_flight.calls();
        calls.done.insert(self.call_id.clone(), Instant::now());
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut calls = self.in_flight.calls();
        calls.held.remove(&self.call_id);
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
}
