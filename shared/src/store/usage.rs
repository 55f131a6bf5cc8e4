//! The usage port's one request as the adapters make it ([`UsageRequest`]): each counter's key,
//! what it adds and up to what limit, told once for both stores.

use crate::domain::device::DeviceId;

/// Partition of an agent plan's round-2 answer counter: `plan#<plan id>`, sort key `answers`.
const PLAN_PREFIX: &str = "plan#";
const PLAN_ANSWERS: &str = "answers";
/// Partition of an API's daily model-token count: `spend#chat` / `spend#agent`, sort key the
/// Japan day, `useCount` the tokens; its ceiling notice is the sort key `<day>#notice`.
const SPEND_PREFIX: &str = "spend#";
const NOTICE_SUFFIX: &str = "#notice";

/// One request of [`UsageStore`](super::UsageStore), by its method: an `ADD` to one counter,
/// with its arguments. Counters other than a device's day share the usage table's key: the
/// partition key (`deviceId`) carries a prefixed id that no device id can take (device ids have
/// no `#`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageRequest<'a> {
    /// [`UsageStore::count_agent_use`](super::UsageStore::count_agent_use)`(id, day, limit,
    /// expire_at)`.
    AgentUse(&'a DeviceId, &'a str, u32, i64),
    /// [`UsageStore::count_plan_answer`](super::UsageStore::count_plan_answer)`(plan_id, limit,
    /// expire_at)`.
    PlanAnswer(&'a str, u32, i64),
    /// [`UsageStore::reserve_tokens`](super::UsageStore::reserve_tokens)`(api, day, tokens,
    /// ceiling, expire_at)`.
    ReserveTokens(&'a str, &'a str, u64, u64, i64),
    /// [`UsageStore::settle_tokens`](super::UsageStore::settle_tokens)`(api, day, delta,
    /// expire_at)`.
    SettleTokens(&'a str, &'a str, i64, i64),
    /// [`UsageStore::claim_ceiling_notice`](super::UsageStore::claim_ceiling_notice)`(api, day,
    /// expire_at)`.
    CeilingNotice(&'a str, &'a str, i64),
}

impl UsageRequest<'_> {
    /// The counter's key in the usage table: partition (`deviceId`) and sort key (`day`).
    pub fn counter(&self) -> (String, String) {
        match *self {
            UsageRequest::AgentUse(id, day, ..) => (id.as_str().to_owned(), day.to_owned()),
            UsageRequest::PlanAnswer(plan_id, ..) => {
                (format!("{PLAN_PREFIX}{plan_id}"), PLAN_ANSWERS.to_owned())
            }
            UsageRequest::ReserveTokens(api, day, ..)
            | UsageRequest::SettleTokens(api, day, ..) => {
                (format!("{SPEND_PREFIX}{api}"), day.to_owned())
            }
            UsageRequest::CeilingNotice(api, day, _) => (
                format!("{SPEND_PREFIX}{api}"),
                format!("{day}{NOTICE_SUFFIX}"),
            ),
        }
    }

    /// What it adds to the counter.
    pub fn amount(&self) -> i64 {
        match *self {
            UsageRequest::ReserveTokens(_, _, tokens, ..) => {
                i64::try_from(tokens).unwrap_or(i64::MAX)
            }
            UsageRequest::SettleTokens(_, _, delta, _) => delta,
            _ => 1,
        }
    }

    /// It adds only while the counter is below this (a limit of 0: never); `None`: always.
    pub fn limit(&self) -> Option<u64> {
        match *self {
            UsageRequest::AgentUse(_, _, limit, _) | UsageRequest::PlanAnswer(_, limit, _) => {
                Some(u64::from(limit))
            }
            UsageRequest::ReserveTokens(_, _, _, ceiling, _) => Some(ceiling),
            UsageRequest::SettleTokens(..) => None,
            UsageRequest::CeilingNotice(..) => Some(1),
        }
    }

    /// The counter's TTL (epoch seconds): each request's last argument.
    pub fn expire_at(&self) -> i64 {
        match *self {
            UsageRequest::AgentUse(.., expire_at)
            | UsageRequest::PlanAnswer(.., expire_at)
            | UsageRequest::ReserveTokens(.., expire_at)
            | UsageRequest::SettleTokens(.., expire_at)
            | UsageRequest::CeilingNotice(.., expire_at) => expire_at,
        }
    }
}
