//! The dispatcher: sends each call reservation's VoIP push at its second, exactly once.
//!
//! **A run** (every minute, from the schedule, a requested run, a wake, or koe-local's loop)
//! covers the reservations due before `start + window` (70 s: the minute until the next run plus
//! 10 s of overlap, so a next run that starts a few seconds late costs nothing), and stays only
//! until the latest of them (`stay`): with none, it ends after its first selection (a part of a
//! split minute stays its whole window; a woken run to the end of its gap, [`wake`]).
//!
//! 1. It selects them by querying the time-bucket index one UTC minute at a time (never a scan):
//!    at the start from `grace` + [`MISSED_LOOKBACK`] back (overdue ones, and claims abandoned
//!    by a run that died), then while it stays every `reselect_every` (5 s) again from the
//!    current minute, so a reservation made after the run started (always at least 10 s ahead)
//!    is seen at least 5 s before its second; it promises that on the minutes' count items, and
//!    a create no staying run covers wakes a run ([`wake`]). At most [`SELECTION_QUERIES_IN_FLIGHT`] of a run's counts and shard
//!    queries are out at once, every minute's first shards before any minute's later ones, and
//!    the run takes each answer on as it comes while it keeps starting the calls it has.
//! 2. Each reservation gets a task that sleeps (on the `Clock`), reads the device's token 2 s
//!    before its second, claims it `claim_lead` (500 ms) before its second with one conditional
//!    write (`scheduled` → `claimed`, or an abandoned claim), marks the push as started 200 ms
//!    before it, sleeps to the second, pushes, and records `sent` or `failed`. Store calls and pushes are bounded by a semaphore
//!    (`concurrency`). A task is started only a second before its device read: until then a
//!    selected reservation waits in the run's queue, so a run that selects thousands at once
//!    starts only the next seconds' tasks and holds no sleeping task per reservation.
//! 3. Reservations more than `grace` late become `missed` without a push.
//!
//! **Exactly once.** The claim is the guard: of any number of runs (duplicated deliveries,
//! overlapping runs), one wins the conditional write and only the winner pushes. A cancel
//! deletes only a `scheduled` record, so it either lands before the claim (no push) or fails
//! with 409 TOO_LATE (the push goes out). 200 ms before the second the winner marks its push as
//! started (`Store::mark_push_started`, conditional on its own claim) and pushes only if that
//! write succeeded. A run that dies between claim and mark leaves a `claimed` record without
//! the mark; once the claim is older than `claim_timeout` a later run re-claims it and sends it
//! (within grace). A push starts only while the claim is surely the run's (checked before each
//! attempt: it may wait long for its permit); otherwise the claim is given back. A marked claim
//! is never taken over: if its run dies after the mark, a later run records the call `failed`
//! (push state unknown) and never pushes it again. Outcome writes are retried with backoff
//! (10 s), so a store hiccup does not leave a sent call to that fate.
//!
//! **Files**, in the order of a run's stages: `dispatcher` (the [`Dispatcher`]: ports and
//! settings), `fan_out` (a big minute split into parts for other invocations), `run` (the run
//! loop: select, queue, start tasks) with `run_state` (one run's shared state) and `stay` (how
//! long a run stays, and its watch), `select` (the selection's requests), `pending` (the queue),
//! `in_flight` (the calls this process's runs hold), `deliver` (one call: read device → claim →
//! mark) with `push_attempts` (the push at APNs) and `confirming` (pushes again), `write_outcome`
//! (its outcome, retried), `step_outcomes` (each step's outcome and how it is counted),
//! `run_report` ([`RunCause`], [`RunReport`]), `timing` (leads and retries), [`wake`] (when a
//! create wakes a run), [`metrics`] and [`trigger`].

pub mod metrics;
pub mod trigger;
pub mod wake;

mod confirming;
mod deliver;
mod dispatcher;
mod fan_out;
mod in_flight;
mod pending;
mod push_attempts;
mod run;
mod run_report;
mod run_state;
mod select;
mod stay;
mod step_outcomes;
mod timing;
mod write_outcome;

pub use deliver::GIVE_BACK;
pub use dispatcher::Dispatcher;
pub use fan_out::workers_for;
pub use in_flight::InFlight;
pub use run::{MISSED_LOOKBACK, buckets};
pub use run_report::{RunCause, RunReport};
pub use select::SELECTION_QUERIES_IN_FLIGHT;
pub use timing::RESOLVE_BUDGET;
pub use write_outcome::FINISH_BUDGET;
