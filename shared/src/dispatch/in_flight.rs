//! The calls this process's runs hold ([`InFlight`]), and one run's hold on one call ([`Held`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use crate::domain::reservation::CallId;

/// The calls that runs in this process have taken on and not yet finished.
#[derive(Clone, Default)]
pub struct InFlight(Arc<Mutex<HashSet<CallId>>>);

impl InFlight {
    /// Takes the call unless a run here already has it; the guard gives it back when dropped.
    pub(super) fn take(&self, call_id: &CallId) -> Option<Held> {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        held.insert(call_id.clone()).then(|| Held {
            in_flight: self.clone(),
            call_id: call_id.clone(),
        })
    }

    /// How many calls are held (for tests).
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
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

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.in_flight.0.lock().unwrap_or_else(|p| p.into_inner());
        held.remove(&self.call_id);
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
        assert!(other.take(&call).is_some(), "free once released");
    }
}
