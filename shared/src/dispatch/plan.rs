//! The calls table's write throughput, spent as a budget: when each call's writes are made.
//!
//! A new on-demand table (and each new index) takes 4,000 write units a second at once
//! (`DispatchConfig::write_budget`; docs/scale.md). Calls due in one crowded second would
//! spend it many times over if each made its writes at fixed leads, so each call's writes are
//! planned into slots of [`SLOT`], each holding the process's share of the budget:
//! what must be done before the second in free slots before it (the claims that do not fit at
//! their lead in the earliest; a confirming device's push mark in the latest, nearest its push),
//! what can wait (the outcome, which also removes the index entry) in the first free slots
//! after the push. The other calls' push marks are their batch's, one write a run and tenth of
//! a second, made at it ([`WritePlan::batch_mark`]). A quiet second's writes
//! keep their fixed leads exactly. Which guarantee each moved write keeps: docs/dispatch.md
//! ("Writes spent as a budget").

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};

use crate::platform::config::{DEFAULT_DISPATCH_CLAIM_LEAD, DEFAULT_DISPATCH_PUSH_BUDGET};

/// The plan's unit of time: a slot holds a tenth of a second's budget.
pub const SLOT: Duration = Duration::milliseconds(100);
/// Of the table's write budget, the share the dispatcher plans to spend (three quarters); the
/// rest is left to creates, confirmations and cancels made meanwhile.
pub const DISPATCH_SHARE: (u64, u64) = (3, 4);
/// How far before its second a call's claim may be planned: its push must leave while the
/// claim is younger than half the claim timeout (15 s by default), with the push budget and
/// the slots' own lateness to spare.
pub const LONGEST_LEAD: Duration = Duration::seconds(10);
/// How long after its second a call's outcome may be put off (never past
/// `RESOLVE_BUDGET`, so a run's time budget is unchanged).
pub const LONGEST_LAG: Duration = Duration::seconds(5);
/// How long after its second a call's missed-call notice may be put off, likewise: after the
/// outcomes (a second whose pushes all failed has as many notices, of two writes each).
pub const LONGEST_NOTICE_LAG: Duration = Duration::seconds(12);

const _: () = assert!(
    LONGEST_LAG.num_milliseconds() < super::timing::RESOLVE_BUDGET.as_millis() as i64,
    "an outcome put off ends inside a run's budget"
);
const _: () = assert!(
    LONGEST_NOTICE_LAG.num_milliseconds() < super::timing::RESOLVE_BUDGET.as_millis() as i64,
    "a notice put off starts inside a run's budget"
);

/// When one delivery makes its writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Slots {
    /// The claim (its device is read `DEVICE_READ_LEAD` before).
    pub claim_at: DateTime<Utc>,
    /// The outcome, at the earliest.
    pub finish_at: DateTime<Utc>,
}

/// How far before its second a call's claim may be planned when claims are abandoned after
/// `claim_timeout`: its push must leave while the claim is younger than half of it, with the
/// push budget (`push_budget`) and a second to spare; at most [`LONGEST_LEAD`].
pub(super) fn longest_claim_lead(claim_timeout: Duration, push_budget: Duration) -> Duration {
    (claim_timeout / 2 - push_budget - Duration::seconds(1)).min(LONGEST_LEAD)
}

/// The most calls of one minute, all due in one second, whose writes the plan fits in
/// `write_budget` units a second with claims abandoned after `claim_timeout`: the smaller of
/// two halves. After the second, their outcomes in [`LONGEST_LAG`], less one second kept for
/// pushes again and the slots' own slack. Before it, one planned write a call (its claim; its
/// push mark is its batch's, one write a run and tenth of a second) from the
/// [`longest_claim_lead`] to the claim's fixed lead, for devices without `confirmsCalls` (one
/// that confirms takes a slot more, for its own mark). With the default claim timeout (30 s: a
/// 10 s lead) the outcomes bind: 12,000 on a new table (bench/dispatch-scale.sh: 15,000 fill
/// the plan to its edge, and what finds no slot keeps its fixed time); under 13 s the claims
/// do (10 s: 7,500).
pub fn calls_on_time(write_budget: u32, claim_timeout: std::time::Duration) -> u32 {
    let share = u64::from(write_budget) * DISPATCH_SHARE.0 / DISPATCH_SHARE.1;
    let after_ms = LONGEST_LAG.num_milliseconds() - 1_000;
    let small = |d| Duration::from_std(d).expect("configured durations are small");
    let lead = longest_claim_lead(small(claim_timeout), small(DEFAULT_DISPATCH_PUSH_BUDGET));
    let claim_lead = small(DEFAULT_DISPATCH_CLAIM_LEAD);
    let before_ms = (lead - claim_lead).num_milliseconds();
    let ms = u64::try_from(after_ms.min(before_ms)).unwrap_or(0);
    u32::try_from(share * ms / 1_000).unwrap_or(u32::MAX)
}

/// One process's plan: the writes planned per slot. Shared by its runs (cheap to clone).
#[derive(Clone)]
pub(super) struct WritePlan {
    budget: u32,
    used: Arc<Mutex<BTreeMap<i64, u32>>>,
}

impl WritePlan {
    pub(super) fn new(write_budget: u32) -> WritePlan {
        WritePlan {
            budget: write_budget,
            used: Arc::default(),
        }
    }

    /// Writes a slot holds for a process that is one of `parts` sharing the table.
    fn per_slot(&self, parts: u32) -> u32 {
        let per_sec = u64::from(self.budget) * DISPATCH_SHARE.0 / DISPATCH_SHARE.1;
        let per_slot = per_sec * SLOT.num_milliseconds() as u64 / 1000 / u64::from(parts.max(1));
        u32::try_from(per_slot.max(1)).unwrap_or(u32::MAX)
    }

    /// Plans the writes of a call due at `at`, none before `now` nor more than `longest_lead`
    /// (at most [`LONGEST_LEAD`]) before `at`: the claim at `at - claim_lead` if its slot has
    /// room, else in the earliest free slot (the slots nearest the second are left to the
    /// marks of devices that confirm their calls, [`WritePlan::mark`]); the outcome in the
    /// first free slot from `at`. A write that finds no free slot in time (or within
    /// [`LONGEST_LAG`]) keeps its fixed time.
    pub(super) fn plan(
        &self,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
        claim_lead: Duration,
        longest_lead: Duration,
        parts: u32,
    ) -> Slots {
        let cap = self.per_slot(parts);
        let mut used = self.used();
        // Slots a minute behind are done with.
        let done = slot_of(now - Duration::minutes(1));
        while used.first_key_value().is_some_and(|(k, _)| *k < done) {
            used.pop_first();
        }
        let earliest = now.max(at - longest_lead.min(LONGEST_LEAD));
        let claim_latest = at - claim_lead;
        let fixed = slot_of(claim_latest);
        let claim_at = if slot_start(fixed) < earliest {
            claim_latest
        } else if used.get(&fixed).is_none_or(|n| *n < cap) {
            *used.entry(fixed).or_insert(0) += 1;
            claim_latest
        } else {
            let mut slot = slot_of(earliest) + 1;
            loop {
                if slot >= fixed {
                    break claim_latest;
                }
                let n = used.entry(slot).or_insert(0);
                if *n < cap {
                    *n += 1;
                    break slot_end(slot);
                }
                slot += 1;
            }
        };
        let finish_at = first_free_after(&mut used, (at, at + LONGEST_LAG), cap, 1);
        Slots {
            claim_at,
            finish_at,
        }
    }

    /// Plans the push mark of a call due at `at` to a device that confirms its calls (a write
    /// of its own: `ClaimMark::Apart`), once its device is read: in the latest free slot ending
    /// by `at - mark_lead`, none before `now` nor more than `longest_lead` before `at`; finding
    /// none, at `at - mark_lead`.
    pub(super) fn mark(
        &self,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
        (mark_lead, longest_lead): (Duration, Duration),
        parts: u32,
    ) -> DateTime<Utc> {
        let cap = self.per_slot(parts);
        let mut used = self.used();
        let earliest = now.max(at - longest_lead.min(LONGEST_LEAD));
        let latest = at - mark_lead;
        let mut slot = slot_of(latest);
        while slot_end(slot - 1) >= earliest {
            let n = used.entry(slot).or_insert(0);
            if *n < cap {
                *n += 1;
                return latest.min(slot_end(slot));
            }
            slot -= 1;
        }
        latest
    }

    /// Counts a run's batch mark made at `at` (`Store::mark_batch`: one write for all of its
    /// pushes of a tenth of a second) into its slot, room or not: it is one write, and the
    /// pushes wait for it.
    pub(super) fn batch_mark(&self, at: DateTime<Utc>) {
        *self.used().entry(slot_of(at)).or_insert(0) += 1;
    }

    fn used(&self) -> std::sync::MutexGuard<'_, BTreeMap<i64, u32>> {
        self.used.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Plans the missed-call notice of a call due at `at`: its two writes (the notice's claim,
    /// then its record) in the first slot from `now` (or `at`, if later) with room for both,
    /// at most [`LONGEST_NOTICE_LAG`] after `at`: a second whose pushes all failed (APNs down)
    /// sends its notices within the budget too. Finding no slot, at once.
    pub(super) fn notice(
        &self,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
        parts: u32,
    ) -> DateTime<Utc> {
        let cap = self.per_slot(parts);
        let mut used = self.used();
        first_free_after(&mut used, (now.max(at), at + LONGEST_NOTICE_LAG), cap, 2)
    }
}

/// Takes `writes` places in the first slot from `from` that has them, starting before
/// `until`: when in it they are made (`from` itself if none has room).
fn first_free_after(
    used: &mut BTreeMap<i64, u32>,
    (from, until): (DateTime<Utc>, DateTime<Utc>),
    cap: u32,
    writes: u32,
) -> DateTime<Utc> {
    let mut slot = slot_of(from);
    loop {
        if slot_start(slot) >= until {
            return from;
        }
        let n = used.entry(slot).or_insert(0);
        if *n + writes <= cap.max(writes) {
            *n += writes;
            return from.max(slot_start(slot) + Duration::milliseconds(1));
        }
        slot += 1;
    }
}

/// The slot holding instant `t`: slot `k` is `(k × SLOT, (k + 1) × SLOT]`, so a write at a
/// slot's end (a whole second, say) is in it.
fn slot_of(t: DateTime<Utc>) -> i64 {
    let ms = t.timestamp_millis();
    let len = SLOT.num_milliseconds();
    (ms + len - 1).div_euclid(len) - 1
}

fn slot_end(slot: i64) -> DateTime<Utc> {
    slot_start(slot + 1)
}

fn slot_start(slot: i64) -> DateTime<Utc> {
    DateTime::UNIX_EPOCH + Duration::milliseconds(slot * SLOT.num_milliseconds())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::clock::utc as t;

    const CLAIM_LEAD: Duration = Duration::milliseconds(500);
    const MARK_LEAD: Duration = Duration::milliseconds(200);

    /// The calls' time in these tests.
    fn call_time() -> DateTime<Utc> {
        t("2026-01-01T07:00:00Z")
    }

    /// `n` calls at [`call_time`], planned at `now` by one plan of `write_budget` units a
    /// second, with `longest` lead and `parts` processes sharing the table.
    fn planned(
        write_budget: u32,
        now: DateTime<Utc>,
        n: usize,
        longest: Duration,
        parts: u32,
    ) -> Vec<Slots> {
        let plan = WritePlan::new(write_budget);
        (0..n)
            .map(|_| plan.plan(call_time(), now, CLAIM_LEAD, longest, parts))
            .collect()
    }

    #[test]
    fn a_quiet_second_keeps_the_fixed_leads() {
        let at = call_time();
        let s = planned(4_000, at - Duration::seconds(30), 1, LONGEST_LEAD, 1)[0];
        assert_eq!(s.claim_at, at - Duration::milliseconds(500));
        assert_eq!(s.finish_at, at);
        let plan = WritePlan::new(4_000);
        let now = at - Duration::seconds(30);
        let mark = plan.mark(at, now, (MARK_LEAD, LONGEST_LEAD), 1);
        assert_eq!(mark, at - Duration::milliseconds(200));
    }

    #[test]
    fn a_crowded_second_spreads_its_writes_within_the_budget() {
        // 4,000 units a second, 3,000 for the dispatcher: 300 a slot; two parts, 150 each.
        let at = call_time();
        let slots = planned(4_000, at - Duration::seconds(30), 4_000, LONGEST_LEAD, 2);
        let mut per_slot: BTreeMap<i64, u32> = BTreeMap::new();
        for s in &slots {
            assert!(s.claim_at <= at - Duration::milliseconds(500), "{s:?}");
            assert!(s.claim_at >= at - LONGEST_LEAD);
            assert!(s.finish_at >= at && s.finish_at <= at + LONGEST_LAG);
            for w in [s.claim_at, s.finish_at] {
                *per_slot.entry(slot_of(w)).or_default() += 1;
            }
        }
        assert!(per_slot.values().all(|n| *n <= 150), "{per_slot:?}");
        // 4,000 claims before the second at 1,500 a second: back to about 3.2 s before it.
        let first = slots.iter().map(|s| s.claim_at).min().unwrap();
        assert!(first < at - Duration::milliseconds(3_000), "{first}");
        let last = slots.iter().map(|s| s.finish_at).max().unwrap();
        assert!(last > at + Duration::seconds(1), "{last}");
    }

    #[test]
    fn what_finds_no_free_slot_keeps_its_fixed_time() {
        let (at, now) = (call_time(), call_time() - Duration::seconds(1));
        // One write a slot: the slots from `now` to the claim's lead hold a few claims, 51
        // outcomes fit in the lag; what finds none keeps its fixed time.
        let s = planned(10, now, 80, LONGEST_LEAD, 1);
        assert!(s.iter().all(|s| s.claim_at >= now));
        assert!(s.iter().all(|s| s.finish_at <= at + LONGEST_LAG));
        let unplanned = s.last().unwrap();
        assert_eq!(unplanned.claim_at, at - Duration::milliseconds(500));
        assert!(s[50].finish_at > at + Duration::milliseconds(4_900));
        assert_eq!(s[51].finish_at, at, "unplanned");
    }

    #[test]
    fn no_write_is_planned_further_ahead_than_the_longest_lead_asked() {
        let (at, longest) = (call_time(), Duration::seconds(1));
        let s = planned(4_000, at - Duration::seconds(30), 3_000, longest, 1);
        let early = |w: DateTime<Utc>| w < at - longest;
        assert!(!s.iter().any(|s| early(s.claim_at)));
        // 5 slots of 300 from 1 s ahead to the claim's lead: the rest keep their fixed times.
        assert_eq!(s[2_999].claim_at, at - Duration::milliseconds(500));
    }

    const DEFAULT_CLAIM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

    #[test]
    fn the_minutes_on_time_capacity_is_its_outcomes_share() {
        assert_eq!(calls_on_time(4_000, DEFAULT_CLAIM_TIMEOUT), 12_000);
        assert_eq!(calls_on_time(40_000, DEFAULT_CLAIM_TIMEOUT), 120_000);
    }

    /// What `calls_on_time` promises is what the plan does, whatever the claim timeout: that
    /// many calls in one second have every write planned within the budget, a second's share
    /// more (beyond what the bound keeps in hand) do not. Under 13 s the claims' lead is the
    /// shorter half (10 s: 3 s of lead).
    #[test]
    fn the_on_time_capacity_is_what_the_plan_fits_for_each_claim_timeout() {
        let at = call_time();
        let push_budget = Duration::from_std(DEFAULT_DISPATCH_PUSH_BUDGET).unwrap();
        let cap = WritePlan::new(4_000).per_slot(1);
        for secs in [6, 10, 16, 24, 30, 120] {
            let timeout = std::time::Duration::from_secs(secs);
            let longest = longest_claim_lead(Duration::seconds(secs as i64), push_budget);
            let fits = |n: usize| {
                let slots = planned(4_000, at - Duration::seconds(30), n, longest, 1);
                let mut per_slot: BTreeMap<i64, u32> = BTreeMap::new();
                for s in &slots {
                    for w in [s.claim_at, s.finish_at] {
                        *per_slot.entry(slot_of(w)).or_default() += 1;
                    }
                }
                per_slot.values().all(|n| *n <= cap)
                    && slots.iter().all(|s| s.claim_at >= at - longest)
            };
            let n = calls_on_time(4_000, timeout) as usize;
            assert!(n > 0, "{secs} s");
            assert!(fits(n), "{secs} s: {n} calls fit");
            // The outcomes' bound keeps a second (and a slot) in hand: more than that does not fit.
            let more = 3_000 + 2 * cap as usize;
            assert!(!fits(n + more), "{secs} s: a second's share more do not");
        }
        let claim_bound = calls_on_time(4_000, std::time::Duration::from_secs(10));
        assert_eq!(
            claim_bound, 7_500,
            "10 s: 3 s - the claim's 0.5 s lead, of 3,000 a second"
        );
    }
}
