//! Every metric the code emits: namespace, name, unit and dimension names. The one list the
//! template's dashboard and alarms are checked against (`tests/it/observability.rs`), and that
//! [`super::Record`] checks each record against in debug builds.

use super::Unit;

/// The dispatcher's runs (the coordinator and its parts).
pub const DISPATCH: &str = "Koe/Dispatch";
/// The HTTP functions: requests, model calls, spend guard.
pub const API: &str = "Koe/Api";

pub struct Metric {
    pub namespace: &'static str,
    pub name: &'static str,
    pub unit: Unit,
    /// The one dimension set the metric is published under.
    pub dimensions: &'static [&'static str],
    pub meaning: &'static str,
}

const fn m(
    namespace: &'static str,
    name: &'static str,
    unit: Unit,
    dimensions: &'static [&'static str],
    meaning: &'static str,
) -> Metric {
    Metric {
        namespace,
        name,
        unit,
        dimensions,
        meaning,
    }
}

const F: &[&str] = &["Function"];
use Unit::{Count, Milliseconds, Percent};

#[rustfmt::skip]
pub const ALL: &[Metric] = &[
    // One record per dispatch run (or part), dimension Function: RunDuration always, each count
    // only when it is not 0.
    m(DISPATCH, "Selected", Count, F, "reservations the run took on"),
    m(DISPATCH, "Claimed", Count, F, "claims made"),
    m(DISPATCH, "Sent", Count, F, "pushes APNs accepted"),
    m(DISPATCH, "Failed", Count, F, "calls recorded failed"),
    m(DISPATCH, "PushUnknown", Count, F, "of Failed: pushes that may have left"),
    m(DISPATCH, "DeadTokens", Count, F, "of Failed: calls to a dead device (APNs 400 BadDeviceToken, 410 Unregistered; an expired device record): the app's state, not ours"),
    m(DISPATCH, "RePushed", Count, F, "pushes again of a call its device did not confirm in time (attempt 2 or later)"),
    m(DISPATCH, "Unconfirmed", Count, F, "calls to devices that confirm their calls that ended with every push unconfirmed"),
    m(DISPATCH, "NoticesSent", Count, F, "missed-call notices APNs took (alert pushes after a call ended failed, missed or unconfirmed)"),
    m(DISPATCH, "NoticesFailed", Count, F, "missed-call notices not sent (APNs refused them, or their store requests got no answer); no alarm of their own"),
    m(DISPATCH, "Confirmed", Count, F, "call pushes a device confirmed (POST /calls/confirm, first confirmation of a call)"),
    m(DISPATCH, "ConfirmLatency", Milliseconds, F, "from a confirmed call's reserved second to its confirmation"),
    m(DISPATCH, "MinuteOverCapacity", Count, F, "minutes whose calls went past what the calls table's write budget serves in one second (DISPATCH_WRITE_BUDGET / 3), written by the create that took them past"),
    m(DISPATCH, "Missed", Count, F, "calls found past their grace"),
    m(DISPATCH, "Lost", Count, F, "claims refused (cancelled, another run's)"),
    m(DISPATCH, "Released", Count, F, "claims given back unpushed (push mark unresolved)"),
    m(DISPATCH, "Abandoned", Count, F, "claims left for a later run"),
    m(DISPATCH, "Resolved", Count, F, "store requests answered only when made again"),
    m(DISPATCH, "Unresolved", Count, F, "store requests still unanswered at their deadline"),
    m(DISPATCH, "StoreRetries", Count, F, "store requests made again"),
    m(DISPATCH, "StoreThrottles", Count, F, "store requests DynamoDB refused for capacity (after the client's attempts)"),
    m(DISPATCH, "StoreErrors", Count, F, "store failures the run could not resolve"),
    m(DISPATCH, "TokensRemoved", Count, F, "device tokens APNs called invalid"),
    m(DISPATCH, "PartsHandedOut", Count, F, "parts of a split minute handed to other runs"),
    m(DISPATCH, "RunDuration", Milliseconds, F, "the run's wall time"),
    m(DISPATCH, "PushLateness", Milliseconds, F, "per sent push: ms after scheduledAt"),
    m(DISPATCH, "ApnsErrors", Count, &["Function", "Reason"], "APNs errors by reason"),
    m(DISPATCH, "ApnsConfigIncomplete", Count, F, "dispatcher starts and pushes only logged because PUSH_SENDER=auto has an APNs key stored and the APNs ids missing or wrong"),
    // One record per request of every HTTP function, dimension Function.
    m(API, "Latency", Milliseconds, F, "to the response head (a stream: its first event)"),
    m(API, "ServerErrors", Count, F, "5xx answers (1 per request that answered 5xx, none written for others)"),
    m(API, "ClientErrors", Count, F, "4xx answers (1 per request that answered 4xx, none written for others)"),
    // Model calls and the spend guard (chat, chat-stream: the chat API's ceiling; agent: its own).
    m(API, "ModelTokens", Count, F, "tokens a model call counted (its usage, or the estimate)"),
    m(API, "ProviderErrors", Count, F, "model calls that failed"),
    m(API, "SpendUsed", Percent, F, "the day's count against the API's ceiling, per reservation"),
];

/// The catalogue's entry for `name` in `namespace`.
pub fn find(namespace: &str, name: &str) -> Option<&'static Metric> {
    ALL.iter()
        .find(|m| m.namespace == namespace && m.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_dimension_sets_small() {
        for (i, a) in ALL.iter().enumerate() {
            assert!(
                ALL[i + 1..]
                    .iter()
                    .all(|b| (a.namespace, a.name) != (b.namespace, b.name)),
                "{} twice",
                a.name
            );
            assert!(
                !a.dimensions.is_empty() && a.dimensions.len() <= 2,
                "{}",
                a.name
            );
        }
        assert_eq!(find(DISPATCH, "PushLateness").unwrap().unit, Milliseconds);
        assert!(find(API, "PushLateness").is_none());
    }
}
