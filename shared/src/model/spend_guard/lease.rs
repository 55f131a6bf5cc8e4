//! How a guard counts at the API's rate without a write per model call on one item
//! (docs/spend-guard.md, "At scale"): one DynamoDB partition key value takes 1,000 writes a
//! second, and a throttled counter fails open.
//!
//! Under a large ceiling ([`LEASE_CEILING`] and above) the day's count is split into
//! [`SHARDS`] counters, each with its share of the ceiling, and each guard (one a container)
//! leases a block of tokens (a few calls' worth) from one of them with one conditional `ADD`,
//! reserves its calls' tokens from that block locally, puts back locally what a call did not
//! use, and returns what is left at most [`LEASE_SECS`] after the lease (or when the day
//! turns). A guard refused by every shard refuses locally for [`REFUSAL_HOLD_SECS`] or a bit
//! more. Under a
//! smaller ceiling each call leases exactly its own tokens from the one counter and returns what
//! it did not use at once: the per-call count, exact to the token.

use std::borrow::Cow;

use chrono::{DateTime, Duration, Utc};

use crate::domain::usage_day::UsageDay;

/// The ceiling from which a guard leases blocks from sharded counters; below it, every call
/// counts itself on the one counter.
pub const LEASE_CEILING: u64 = 100_000_000;
/// Counters the day's count is split into, each with an equal share of the ceiling.
pub const SHARDS: u32 = 8;
/// A block holds this many times the tokens of the call that leases it.
pub const CALLS_PER_LEASE: u64 = 8;
/// What is left of a block goes back to its counter at the first settlement this long after
/// the lease.
pub const LEASE_SECS: i64 = 30;
/// A guard refused by every shard refuses without asking the store for this long (and up to
/// half as long again, at random).
pub const REFUSAL_HOLD_SECS: i64 = 10;

/// How a guard counts for one ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeasePlan {
    pub shards: u32,
    pub calls_per_lease: u64,
}

impl LeasePlan {
    pub fn for_ceiling(ceiling: u64) -> LeasePlan {
        if ceiling >= LEASE_CEILING {
            LeasePlan {
                shards: SHARDS,
                calls_per_lease: CALLS_PER_LEASE,
            }
        } else {
            LeasePlan {
                shards: 1,
                calls_per_lease: 1,
            }
        }
    }

    /// Whether a guard keeps tokens between calls.
    pub fn leasing(&self) -> bool {
        self.calls_per_lease > 1
    }

    /// Each shard's share of `ceiling`.
    pub fn shard_ceiling(&self, ceiling: u64) -> u64 {
        ceiling.div_ceil(u64::from(self.shards))
    }

    /// The most the day's count can pass the ceiling by when no call reserves more than
    /// `bound`: a lease is granted while its shard is below its share, so each shard passes it
    /// by at most one block.
    pub fn slack(&self, bound: u64) -> u64 {
        u64::from(self.shards) * self.calls_per_lease * bound
    }
}

/// The counter name of `api`'s shard: shard 0 is the API's own (`chat`), shard k `chat#k`.
pub fn shard_counter(api: &str, shard: u32) -> Cow<'_, str> {
    match shard {
        0 => Cow::Borrowed(api),
        k => Cow::Owned(format!("{api}#{k}")),
    }
}

/// Tokens a guard has leased from a day's counter and not yet reserved for a call.
#[derive(Debug)]
pub struct Block {
    pub day: UsageDay,
    /// Where what is left goes back.
    pub shard: u32,
    pub tokens: u64,
    pub leased_at: DateTime<Utc>,
}

impl Block {
    pub fn expired(&self, now: DateTime<Utc>) -> bool {
        now - self.leased_at >= Duration::seconds(LEASE_SECS)
    }
}

/// A guard's state between calls.
#[derive(Debug, Default)]
pub struct Lease {
    pub block: Option<Block>,
    /// The day every shard refused, and until when this guard refuses without asking.
    pub refused: Option<(String, DateTime<Utc>)>,
}

impl Lease {
    pub fn refuses(&self, day: &UsageDay, now: DateTime<Utc>) -> bool {
        self.refused
            .as_ref()
            .is_some_and(|(refused, until)| *refused == day.key && now < *until)
    }
}
