//! The dispatcher: sends each call reservation's VoIP push at its second, exactly once.
//!
//! What a run does and why each call is pushed exactly once are told in docs/dispatch.md
//! ("How a run works", "Exactly once"); the code of each rule sits in the file of its stage.
//!
//! **Files**, in the order of a run's stages: `dispatcher` (the [`Dispatcher`]: ports and
//! settings), `fan_out` (a big minute split into parts for other invocations), `run` (the run
//! loop: select, queue, start tasks) with `run_state` (one run's shared state) and `stay` (how
//! long a run stays, and its watch), `select` (the selection's requests), `pending` (the queue),
//! `in_flight` (the calls this process's runs hold), `sweep` (the minutes
//! older than the look-back that no run selected), `deliver` (one call: read device → claim →
//! mark) with `batch` (the marks of a run's pushes by tenth of a second, and the fence on a stopped
//! run's), `push_attempts` (the push at APNs) and `confirming` (pushes again), `write_outcome`
//! (its outcome, retried), `notice` (the missed-call notice after a bad outcome), `step_outcomes` (each step's outcome and how it is counted),
//! `run_report` ([`RunCause`], [`RunReport`]), `timing` (leads and retries), `store_gate` (the store requests out at once), [`wake`] (when a
//! create wakes a run), [`metrics`] and [`trigger`].

pub mod api;
pub mod handler;
pub mod metrics;
pub mod oidc;
pub mod trigger;
pub mod wake;

mod batch;
mod confirming;
mod deliver;
mod dispatcher;
mod fan_out;
mod in_flight;
pub mod notice;
mod pending;
pub mod plan;
mod push_attempts;
mod run;
mod run_report;
mod run_state;
mod select;
mod stay;
mod step_outcomes;
mod store_gate;
mod sweep;
mod timing;
mod write_outcome;

pub use confirming::LAST_WAIT_STAY;
pub use deliver::GIVE_BACK;
pub use dispatcher::Dispatcher;
pub use fan_out::workers_for;
pub use in_flight::InFlight;
pub use plan::calls_on_time;
pub use run::MISSED_LOOKBACK;
pub use run_report::{RunCause, RunReport};
pub use select::SELECTION_QUERIES_IN_FLIGHT;
pub use select::buckets;
pub use sweep::SWEEP_PER_RUN;
pub use timing::{ANSWER_WAIT, RESOLVE_BUDGET};
pub use write_outcome::FINISH_BUDGET;
