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
    /// [`UsageStore::read_tokens`](super::UsageStore::read_tokens)`(api, day)`: no write, the
    /// count as it stands (a missing counter: 0).
    ReadTokens(&'a str, &'a str),
    /// [`UsageStore::settle_tokens`](super::UsageStore::settle_tokens)`(api, day, delta,
    /// expire_at)`.
    SettleTokens(&'a str, &'a str, i64, i64),
    /// [`UsageStore::claim_ceiling_notice`](super::UsageStore::claim_ceiling_notice)`(api, day,
    /// expire_at)`.
    CeilingNotice(&'a str, &'a str, i64),
    /// [`UsageStore::ceiling_noticed`](super::UsageStore::ceiling_noticed)`(api, day)`: no
    /// write, the notice's count (1 once claimed, else 0).
    ReadNotice(&'a str, &'a str),
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
            | UsageRequest::ReadTokens(api, day)
            | UsageRequest::SettleTokens(api, day, ..) => {
                (format!("{SPEND_PREFIX}{api}"), day.to_owned())
            }
            UsageRequest::CeilingNotice(api, day, _) | UsageRequest::ReadNotice(api, day) => (
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
            UsageRequest::ReadTokens(..) | UsageRequest::ReadNotice(..) => 0,
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
            UsageRequest::SettleTokens(..)
            | UsageRequest::ReadTokens(..)
            | UsageRequest::ReadNotice(..) => None,
            UsageRequest::CeilingNotice(..) => Some(1),
        }
    }

    /// Whether it only reads the counter ([`UsageRequest::ReadTokens`],
    /// [`UsageRequest::ReadNotice`]).
    pub fn reads(&self) -> bool {
        matches!(
            self,
            UsageRequest::ReadTokens(..) | UsageRequest::ReadNotice(..)
        )
    }

    /// The counter's TTL (epoch seconds): each writing request's last argument (a read: 0).
    pub fn expire_at(&self) -> i64 {
        match *self {
            UsageRequest::ReadTokens(..) | UsageRequest::ReadNotice(..) => 0,
            UsageRequest::AgentUse(.., expire_at)
            | UsageRequest::PlanAnswer(.., expire_at)
            | UsageRequest::ReserveTokens(.., expire_at)
            | UsageRequest::SettleTokens(.., expire_at)
            | UsageRequest::CeilingNotice(.., expire_at) => expire_at,
        }
    }
}
