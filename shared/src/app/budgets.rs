//! Time budgets of what no deadline cuts: a dispatch run (its window and its last call) and the
//! streamed chat (its provider budget), so that a test (`shared/tests/it/time_budgets.rs`) can
//! hold them to `template.yaml`'s function timeouts with a margin.
//!
//! Every endpoint served through `edge::Service::handle` spends its invocation's deadline
//! instead (`crate::platform::deadline`): no count of its requests is kept by hand;
//! `shared/tests/it/deadlines.rs` drives each along its longest path with a slow store and
//! measures that it answers before its timeout. What is kept here for them is only that the
//! provider's own budget ends before the deadline would, so a slow provider is answered
//! `PROVIDER_TIMEOUT`, not 503.

use std::time::Duration;

use crate::app::edge::NOTIFY_TIMEOUT;
use crate::dispatch::notice::{NOTICE_BUDGET, NOTICE_RECORD_BUDGET};
use crate::dispatch::wake::LONGEST_WAKE;
use crate::dispatch::{ANSWER_WAIT, FINISH_BUDGET, GIVE_BACK, LAST_WAIT_STAY, RESOLVE_BUDGET};
use crate::platform::config::{
    DEFAULT_DISPATCH_PUSH_BUDGET, DEFAULT_DISPATCH_WINDOW, MAX_PROVIDER_TIMEOUT_MS,
};
use crate::platform::deadline::{ANSWER_RESERVE, MARGIN};
use crate::store::dynamodb::{DISPATCH_ATTEMPT_TIMEOUT, OPERATION_TIMEOUT};

/// API Gateway's integration timeout, taken at 29 s (HTTP APIs allow 30): an HTTP function
/// must have answered by then.
pub const GATEWAY_TIMEOUT: Duration = Duration::from_secs(29);

/// One function's worst case: its sequential parts, each at its timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// The function's logical id in `template.yaml`.
    pub function: &'static str,
    pub parts: Vec<(&'static str, Duration)>,
    /// Whether API Gateway waits for it (its answer must come before [`GATEWAY_TIMEOUT`]).
    pub behind_gateway: bool,
}

impl Budget {
    pub fn total(&self) -> Duration {
        self.parts.iter().map(|(_, d)| *d).sum()
    }
}

/// The budgets with the provider's at `provider` (its highest is [`MAX_PROVIDER_TIMEOUT_MS`]).
pub fn worst_cases(provider: Duration) -> Vec<Budget> {
    // Behind the edge's deadline: the provider's budget (its counters and retry included)
    // ends before the handler's deadline, which is `ANSWER_RESERVE` + `MARGIN` before the
    // function's timeout.
    let before_the_deadline = |function| Budget {
        function,
        parts: vec![
            (
                "budget: spend counters and provider (retry included)",
                provider,
            ),
            (
                "the answer's reserve (its error notification)",
                ANSWER_RESERVE,
            ),
            ("the runtime's margin", MARGIN),
        ],
        behind_gateway: true,
    };
    vec![
        // The streamed chat, behind a function URL (no gateway limit, no deadline): the spend
        // reservation, the stream within the provider budget, the correction when the usage
        // arrives, then an `error` event's notification.
        Budget {
            function: "ChatStreamFunction",
            parts: vec![
                ("spend reservation", OPERATION_TIMEOUT),
                ("budget: the streamed completion", provider),
                ("spend correction", OPERATION_TIMEOUT),
                ("error notification", NOTIFY_TIMEOUT),
                ("the runtime's margin", MARGIN),
            ],
            behind_gateway: false,
        },
        before_the_deadline("ChatFunction"),
        before_the_deadline("AgentFunction"),
        // A scheduled run: its window, then the last re-selection (every bucket at once) and
        // the last reservation's task (device read, claim, push, outcome).
        Budget {
            function: "DispatchFunction",
            parts: dispatch_run(),
            behind_gateway: false,
        },
        // A part of a split window runs as a run does (dispatch::fan_out).
        Budget {
            function: "DispatchPartFunction",
            parts: dispatch_run(),
            behind_gateway: false,
        },
        // A run that stays past its window for the wait after a call's last push.
        Budget {
            function: "DispatchFunction",
            parts: dispatch_last_wait(),
            behind_gateway: false,
        },
        Budget {
            function: "DispatchPartFunction",
            parts: dispatch_last_wait(),
            behind_gateway: false,
        },
    ]
}

/// A dispatch run that stays for the wait after a call's last push (`dispatch::LAST_WAIT_STAY`
/// past its window at most), then records it `unconfirmed`: the call's device read and claim
/// made again until answered, its outcome retried, and its missed-call notice.
fn dispatch_last_wait() -> Vec<(&'static str, Duration)> {
    vec![
        (
            "run window (a woken run's reaches the end of its gap)",
            DEFAULT_DISPATCH_WINDOW.max(LONGEST_WAKE),
        ),
        (
            "a last push's confirmation wait past the window",
            LAST_WAIT_STAY.to_std().expect("positive"),
        ),
        (
            "device read and claim at its end, made again until answered",
            RESOLVE_BUDGET,
        ),
        (
            "outcome `unconfirmed`, retried",
            FINISH_BUDGET + DISPATCH_ATTEMPT_TIMEOUT,
        ),
        (
            "missed-call notice: claim and push, then its record",
            NOTICE_BUDGET + NOTICE_RECORD_BUDGET + DISPATCH_ATTEMPT_TIMEOUT * 2,
        ),
        ("the runtime's margin", MARGIN),
    ]
}

/// [`worst_cases`] at the highest provider budget the configuration accepts.
pub fn at_the_limits() -> Vec<Budget> {
    worst_cases(Duration::from_millis(MAX_PROVIDER_TIMEOUT_MS))
}

/// A dispatch run's worst case: its window, then the last re-selection (a minute's count, then
/// its shards at once), then the last reservation's task: its device read, claim and push mark
/// made again until answered, at most [`RESOLVE_BUDGET`] past its second (which is at most the
/// window's end), then either its claim given back (at most [`GIVE_BACK`] more) or the push and
/// the outcome retried for [`FINISH_BUDGET`] and a last attempt (the longer of the two).
fn dispatch_run() -> Vec<(&'static str, Duration)> {
    vec![
        (
            "run window (a woken run's reaches the end of its gap)",
            DEFAULT_DISPATCH_WINDOW.max(LONGEST_WAKE),
        ),
        (
            "last re-selection (a count, then the shards at once)",
            OPERATION_TIMEOUT * 2,
        ),
        (
            "device read, claim and push mark, made again until answered",
            RESOLVE_BUDGET,
        ),
        (
            "push, then its answer awaited",
            DEFAULT_DISPATCH_PUSH_BUDGET + ANSWER_WAIT,
        ),
        (
            "outcome, retried (or the claim given back, shorter)",
            (FINISH_BUDGET + DISPATCH_ATTEMPT_TIMEOUT).max(GIVE_BACK.to_std().expect("positive")),
        ),
        (
            "missed-call notice: claim and push, then its record",
            NOTICE_BUDGET + NOTICE_RECORD_BUDGET + DISPATCH_ATTEMPT_TIMEOUT * 2,
        ),
        ("the runtime's margin", MARGIN),
    ]
}
