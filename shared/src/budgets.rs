//! Time budgets: every function's worst case, from each dependency's timeout and retries, so
//! that a test (`shared/tests/it/time_budgets.rs`) can hold them to `template.yaml`'s function
//! timeouts with a margin. A dependency that hangs then costs a clear error answer (and its
//! notification), never a function killed by Lambda with nothing said.
//!
//! The parts are the code's own constants: raising one of them past what its function's timeout
//! allows fails that test.

use std::time::Duration;

use crate::config::{
    DEFAULT_DISPATCH_PUSH_BUDGET, DEFAULT_DISPATCH_WINDOW, MAX_PROVIDER_TIMEOUT_MS,
};
use crate::dispatch::trigger::TRIGGER_TIMEOUT;
use crate::dispatch::wake::LONGEST_WAKE;
use crate::dispatch::{FINISH_BUDGET, GIVE_BACK, RESOLVE_BUDGET};
use crate::edge::NOTIFY_TIMEOUT;
use crate::oidc::FETCH_TIMEOUT;
use crate::store::dynamodb::{DISPATCH_ATTEMPT_TIMEOUT, OPERATION_TIMEOUT};

/// What every function keeps in hand below its timeout (the runtime's own work, logging).
pub const MARGIN: Duration = Duration::from_millis(500);
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

fn store_ops(n: u32) -> Duration {
    OPERATION_TIMEOUT * n
}

/// Every function's worst case, the provider's budget at `provider` (its highest is
/// [`MAX_PROVIDER_TIMEOUT_MS`]).
pub fn worst_cases(provider: Duration) -> Vec<Budget> {
    let http = |function, parts: Vec<(&'static str, Duration)>| Budget {
        function,
        parts,
        behind_gateway: true,
    };
    let notification = ("error notification", NOTIFY_TIMEOUT);
    vec![
        // The streamed chat, behind a function URL (no gateway limit): the spend reservation,
        // the stream within the provider budget (its deadline is the call's), the correction
        // when the usage arrives, then an `error` event's notification.
        Budget {
            function: "ChatStreamFunction",
            parts: vec![
                ("spend reservation", store_ops(1)),
                ("budget: the streamed completion", provider),
                ("spend correction", store_ops(1)),
                notification,
            ],
            behind_gateway: false,
        },
        // The completion and its spend reservation and correction share one budget.
        http(
            "ChatFunction",
            vec![
                (
                    "budget: spend counters and provider (retry included)",
                    provider,
                ),
                notification,
            ],
        ),
        // The round's counter (daily limit or plan answers) and its completions (up to two,
        // each with its spend counters) share one budget.
        http(
            "AgentFunction",
            vec![("budget: counters and completions", provider), notification],
        ),
        http("HealthFunction", vec![notification]),
        http("InfoFunction", vec![notification]),
        http("ErrorTestFunction", vec![notification]),
        // Read the device's secret state, conditional write; once more if it changed between.
        http(
            "PutDeviceFunction",
            vec![
                (
                    "GetItem + conditional PutItem devices, at most twice",
                    store_ops(2 * crate::store::dynamodb::devices::ATTEMPTS),
                ),
                notification,
            ],
        ),
        // Kept answer, device, the minute's count, reservation, then keeping the answer (or,
        // for a copy that lost the race, reading the kept answer again).
        http(
            "CreateCallFunction",
            vec![("5 DynamoDB operations", store_ops(5)), notification],
        ),
        // The device's secret state, then the reservation.
        http(
            "GetCallFunction",
            vec![
                ("GetItem devices + GetItem scheduledCalls", store_ops(2)),
                notification,
            ],
        ),
        http(
            "CancelCallFunction",
            vec![
                ("GetItem devices + DeleteItem scheduledCalls", store_ops(2)),
                notification,
            ],
        ),
        // The device's secret state and its proof; the confirmation (one conditional write),
        // asked again for at most `IN_FLIGHT_WAIT` while a push of the
        // call leaves, the last ask starting just before that wait ends.
        http(
            "ConfirmCallFunction",
            vec![
                (
                    "GetItem + UpdateItem devices (the secret's proof)",
                    store_ops(2),
                ),
                (
                    "asked again while a push leaves",
                    crate::handlers::confirm::IN_FLIGHT_WAIT,
                ),
                (
                    "the last ask: conditional UpdateItem scheduledCalls",
                    store_ops(1),
                ),
                notification,
            ],
        ),
        // A scheduled run: its window, then the last re-selection (every bucket at once) and
        // the last reservation's task (device read, claim, push, outcome). The HTTP route has
        // a function of its own (`dispatch_request`).
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
    ]
}

/// The dispatch binary's HTTP route (`POST /internal/dispatch`), behind API Gateway, in a
/// function of its own (`DispatchRouteFunction`).
pub fn dispatch_request() -> Budget {
    Budget {
        function: "DispatchRouteFunction",
        parts: vec![
            ("JWKS fetch", FETCH_TIMEOUT),
            ("hand-off to a run", TRIGGER_TIMEOUT),
            ("error notification", NOTIFY_TIMEOUT),
        ],
        behind_gateway: true,
    }
}

/// [`worst_cases`] at the highest provider budget the configuration accepts.
pub fn at_the_limits() -> Vec<Budget> {
    let mut all = worst_cases(Duration::from_millis(MAX_PROVIDER_TIMEOUT_MS));
    all.push(dispatch_request());
    all
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
        ("last re-selection", store_ops(2)),
        (
            "device read, claim and push mark, made again until answered",
            RESOLVE_BUDGET,
        ),
        ("push", DEFAULT_DISPATCH_PUSH_BUDGET),
        (
            "outcome, retried (or the claim given back, shorter)",
            (FINISH_BUDGET + DISPATCH_ATTEMPT_TIMEOUT).max(GIVE_BACK.to_std().expect("positive")),
        ),
    ]
}
