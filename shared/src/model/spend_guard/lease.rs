//! How a guard counts at the API's rate without a write per model call on one item, at every
//! ceiling (docs/spend-guard.md, "At scale"): one DynamoDB partition key value takes 1,000
//! writes a second, and each counter is one.
//!
//! The day's count is split into [`LeasePlan::shards`] counters (one per two of the largest
//! calls' reservations of the ceiling, at most [`MAX_SHARDS`]), each with an equal share of
//! the ceiling. A guard (one a container) reads a shard before it writes to it (a refusal costs
//! a read, not a write) and then leases from it, with one conditional `ADD`, either a block of
//! [`CALLS_PER_LEASE`] calls' tokens, never more than [`REMAINDER_SHARE`]th of what the shard
//! has left and only if it fits whole under the shard's share, or, near the end, exactly the
//! call's own tokens while the shard is under its share: no shard passes its share by more than
//! one call's reservation ([`LeasePlan::slack`]). A block's calls reserve from it locally, what
//! a call did not use goes back to it, and what is left goes back to its counter at most
//! [`LEASE_SECS`] after the lease (or when the day turns); a call's own lease is settled on its
//! counter at once. A shard a guard found full is not asked again for [`REFUSAL_HOLD_SECS`] or
//! a bit more (unless the guard gives back to it); a guard all of whose shards are full
//! refuses without asking.

use std::borrow::Cow;

use chrono::{DateTime, Duration, Utc};

use super::MODEL_CONTEXT_TOKENS;
use crate::domain::chat::MAX_MAX_TOKENS;
use crate::domain::usage_day::UsageDay;

/// The largest reservation one call can make: the model's context and the largest `maxTokens`.
pub const LARGEST_CALL: u64 = MODEL_CONTEXT_TOKENS + MAX_MAX_TOKENS as u64;
/// Most counters the day's count is split into.
pub const MAX_SHARDS: u32 = 8;
/// Every shard's share is at least this many of the largest calls' reservations.
pub const LARGEST_CALLS_PER_SHARD: u64 = 2;
/// A block holds at most this many times the tokens of the call that leases it.
pub const CALLS_PER_LEASE: u64 = 8;
/// A block takes at most this fraction (1/4) of what its shard had left when it was read: near
/// the end blocks shrink, so that containers do not hold the rest unspent between them.
pub const REMAINDER_SHARE: u64 = 4;
/// A block smaller than this many calls' tokens is not kept: the call leases its own.
pub const MIN_BLOCK_CALLS: u64 = 1;
/// What is left of a block goes back to its counter at the first settlement this long after
/// the lease.
pub const LEASE_SECS: i64 = 30;
/// A shard a guard found full is not asked again for this long (and up to half as long
/// again, at random).
pub const REFUSAL_HOLD_SECS: i64 = 10;

/// How a guard counts for one ceiling: its shards and each one's share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeasePlan {
    pub shards: u32,
    /// Each shard's share of the ceiling (the shares add up to at least the ceiling).
    pub share: u64,
}

impl LeasePlan {
    pub fn for_ceiling(ceiling: u64) -> LeasePlan {
        let per_shard = LARGEST_CALLS_PER_SHARD * LARGEST_CALL;
        let shards = (ceiling / per_shard).clamp(1, u64::from(MAX_SHARDS)) as u32;
        LeasePlan {
            shards,
            share: ceiling.div_ceil(u64::from(shards)),
        }
    }

    /// What a call reserving `bound` leases from a shard read at `total`: a block when at least
    /// [`MIN_BLOCK_CALLS`] calls' tokens fit in [`REMAINDER_SHARE`]th of what is left, else the
    /// call's own tokens ([`Want::Own`]); nothing once the shard is at its share.
    pub fn lease(&self, bound: u64, total: u64) -> Option<Want> {
        let left = self.share.checked_sub(total).filter(|left| *left > 0)?;
        let block = (bound * CALLS_PER_LEASE).min(left / REMAINDER_SHARE);
        Some(if block >= bound * MIN_BLOCK_CALLS {
            Want::Block(block)
        } else {
            Want::Own(bound)
        })
    }

    /// The most the day's count can pass the ceiling by when no call reserves more than
    /// `bound`: a block is granted only whole under its shard's share, a call's own tokens
    /// while the shard is below it, so each shard passes its share by less than one call.
    pub fn slack(&self, bound: u64) -> u64 {
        u64::from(self.shards) * bound
    }

    /// The most tokens a guard holds in its block, unspent (counted, not yet used).
    pub fn largest_block(&self, bound: u64) -> u64 {
        (bound * CALLS_PER_LEASE).min(self.share / REMAINDER_SHARE)
    }
}

/// What a guard asks a shard for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// A block for several calls, granted only if it fits whole under the shard's share.
    Block(u64),
    /// The call's own tokens, granted while the shard is below its share.
    Own(u64),
}

impl Want {
    pub fn tokens(self) -> u64 {
        match self {
            Want::Block(t) | Want::Own(t) => t,
        }
    }

    /// The store's limit for it: it adds only while the shard's count is below this.
    pub fn limit(self, share: u64) -> u64 {
        match self {
            Want::Block(t) => share - t + 1,
            Want::Own(_) => share,
        }
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
    /// The day each shard was found full on, and until when this guard does not ask it.
    pub full: Vec<Option<(String, DateTime<Utc>)>>,
    /// Tokens of calls let through while the counter did not answer (fail-open), with their
    /// day: added to the next write to that day's count that answers.
    pub owed: Option<(UsageDay, u64)>,
}

impl Lease {
    /// Whether this guard takes `shard` to be full on `day` at `now`.
    pub fn full(&self, shard: u32, day: &UsageDay, now: DateTime<Utc>) -> bool {
        self.full
            .get(shard as usize)
            .and_then(Option::as_ref)
            .is_some_and(|(d, until)| *d == day.key && now < *until)
    }

    /// `shard` may have room again (this guard gave back to it): asked at the next lease.
    pub fn has_room(&mut self, shard: u32) {
        if let Some(full) = self.full.get_mut(shard as usize) {
            *full = None;
        }
    }

    /// `shard` found full on `day` at `now`: not asked again for a while (jittered, so that
    /// guards that found it full together do not ask again together).
    pub fn found_full(&mut self, shard: u32, day: &UsageDay, now: DateTime<Utc>) {
        let at = shard as usize;
        if self.full.len() <= at {
            self.full.resize(at + 1, None);
        }
        let hold = REFUSAL_HOLD_SECS * 1000;
        let until = now + Duration::milliseconds(hold + fastrand::i64(0..hold / 2));
        self.full[at] = Some((day.key.clone(), until));
    }
}
