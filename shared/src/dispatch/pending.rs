//! A run's queue of selected reservations whose tasks have not started yet ([`Pending`]).

use chrono::{DateTime, Utc};

use super::in_flight::Held;
use super::plan::Slots;
use crate::domain::due::DueCall;

/// What a selected reservation's task will do.
#[derive(Debug, Clone, Copy)]
pub(super) enum Task {
    /// A push, its writes at these times.
    Deliver(Slots),
    Miss,
}

/// A run's selected reservations whose tasks have not started, by start time.
#[derive(Default)]
pub(super) struct Pending(std::collections::BTreeMap<DateTime<Utc>, Vec<(Task, DueCall, Held)>>);

impl Pending {
    pub(super) fn add(&mut self, start: DateTime<Utc>, task: Task, r: DueCall, held: Held) {
        self.0.entry(start).or_default().push((task, r, held));
    }

    /// The most entries due within one second.
    pub(super) fn busiest_second(&self) -> usize {
        let mut per_second = std::collections::HashMap::new();
        for (_, r, _) in self.0.values().flatten() {
            *per_second.entry(r.due_at.timestamp()).or_insert(0) += 1;
        }
        per_second.into_values().max().unwrap_or(0)
    }

    pub(super) fn next_start(&self) -> Option<DateTime<Utc>> {
        self.0.keys().next().copied()
    }

    /// Removes and returns every entry whose start is at or before `now`, earliest first.
    pub(super) fn take_until(&mut self, now: DateTime<Utc>) -> Vec<(Task, DueCall, Held)> {
        let later = self.0.split_off(&(now + chrono::Duration::nanoseconds(1)));
        std::mem::replace(&mut self.0, later)
            .into_values()
            .flatten()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::InFlight;

    use crate::platform::clock::utc as t;

    #[test]
    fn pending_hands_out_what_has_started_in_start_order_and_keeps_the_rest() {
        let r = |i: u32| {
            DueCall::from(&crate::domain::reservation::Reservation::new(
                crate::domain::device::DeviceId::parse(
                    "deviceId",
                    &format!("{i:08}-0000-4000-8000-000000000000"),
                )
                .unwrap(),
                crate::domain::reservation::ScheduledAt::from_stored(
                    t("2026-01-01T00:01:00Z").fixed_offset(),
                ),
                None,
                t("2026-01-01T00:00:00Z"),
            ))
        };
        let at = t("2026-01-01T00:01:00Z");
        let deliver = Task::Deliver(Slots {
            claim_at: at,
            finish_at: at,
        });
        let in_flight = InFlight::default();
        let mut pending = Pending::default();
        assert_eq!(pending.next_start(), None);
        for (start, task, i) in [
            ("2026-01-01T00:00:20Z", deliver, 3),
            ("2026-01-01T00:00:10Z", deliver, 1),
            ("2026-01-01T00:00:10Z", Task::Miss, 2),
            ("2026-01-01T00:00:30Z", deliver, 4),
        ] {
            let r = r(i);
            let held = in_flight.take(&r.call_id).expect("free");
            pending.add(t(start), task, r, held);
        }
        assert_eq!(in_flight.len(), 4);
        assert_eq!(pending.busiest_second(), 4, "all four are due at 00:01:00");
        assert_eq!(pending.next_start(), Some(t("2026-01-01T00:00:10Z")));
        assert!(pending.take_until(t("2026-01-01T00:00:09.999Z")).is_empty());
        let ids = |v: Vec<(Task, DueCall, Held)>| -> Vec<String> {
            v.into_iter()
                .map(|(_, r, _)| r.device_id.as_str()[..8].to_string())
                .collect()
        };
        assert_eq!(
            ids(pending.take_until(t("2026-01-01T00:00:20Z"))),
            vec!["00000001", "00000002", "00000003"],
            "a start exactly at `now` is due"
        );
        assert_eq!(pending.next_start(), Some(t("2026-01-01T00:00:30Z")));
        assert_eq!(
            in_flight.len(),
            1,
            "handed-out entries released once dropped"
        );
        assert_eq!(
            ids(pending.take_until(t("2026-01-01T00:05:00Z"))),
            vec!["00000004"]
        );
        assert_eq!(pending.next_start(), None);
        assert!(in_flight.is_empty());
    }
}
