//! Where the dispatcher finds a reservation: its UTC minute's bucket, write-sharded by call.
//!
//! A minute's bucket is split into as many shards as the reservations made for that minute need
//! (shard 0 and one more per [`CALLS_PER_SHARD`] of the minute's count; the count is an
//! estimate raised by [`COUNT_STEP`] by one create in `COUNT_STEP`), so that no index
//! partition takes more than a few hundred writes in the minute's busiest second however many
//! calls share it (docs/scale.md). A reservation's shard is fixed when it is made, from the count
//! then; the count only grows, so the readers, who take the count when they read, always query
//! every shard a reservation can be in. The price of fixing shards early: the first shards
//! collect the first reservations, so shard 0 ends with about `CALLS_PER_SHARD * (1 + ln(n /
//! CALLS_PER_SHARD))` of a minute's `n` (about 290 of 100,000), not `CALLS_PER_SHARD`; hence
//! the small target. The count being an estimate adds its own spread (every call before the
//! first raise goes to shard 0: 32 on average, more than 300 about once in 14,000 minutes): the
//! busiest shard of 100,000 is then about 300, rarely past 350 (a simulation, 8 minutes). The shard count stops growing at [`MAX_CALLS_PER_MINUTE`], so a count
//! inflated past what a minute can really hold costs each selection at most [`MAX_SHARDS`]
//! queries. Workers take every `of`-th shard ([`Part`]), so the crowded first shards are spread
//! over all of them.

use std::iter::StepBy;
use std::ops::Range;

use super::device::DeviceId;
use super::reservation::{CallId, Reservation, ScheduledAt};

/// Reservations per shard a minute's shard count aims at. In the minute's busiest second each
/// finished call removes its index entry (one index write), so even if every call of the minute
/// is due in the same second its busiest shard takes a few hundred writes in it (see above).
pub const CALLS_PER_SHARD: u32 = 32;
/// What a counting create adds to its minute's count; one create in [`COUNT_STEP`] counts
/// ([`raises_count`]), so the count is an estimate of the reservations made for the minute (each
/// is counted as `COUNT_STEP` with chance `1 / COUNT_STEP`: an unbiased estimate; a minute
/// without a count has its calls in shard 0, which readers query count or not) that costs a create about
/// `1 / COUNT_STEP` write instead of one. It equals [`CALLS_PER_SHARD`] because the count is
/// read only through [`shards_for`], in steps of `CALLS_PER_SHARD`: each raise adds exactly one
/// shard (`shards_for(k * COUNT_STEP) == k + 1`), so a finer step would cost more writes
/// for no finer shard count, and a coarser one would add shards in jumps of several. It also
/// bounds the capacity notice's step (`calls::capacity`: a count that crosses the budget
/// crosses it within one step).
pub const COUNT_STEP: u32 = CALLS_PER_SHARD;
// [`raises_count`] takes the hash's top `log2(COUNT_STEP)` bits.
const _: () = assert!(COUNT_STEP.is_power_of_two());
/// The most reservations a minute's shard count grows with: what the stack, as deployed by
/// default, sends in one window at full speed (`DispatchMaxWorkers` 32 parts of
/// `DispatchCallsPerWorker` 5,000 calls). A count beyond it (a minute that really holds more, or
/// one inflated by creates that were cancelled, or by a write straight into the table) adds no
/// shard: the writer spreads further reservations over the same shards (about 470 in the
/// busiest of a million, still under half a partition's 1,000 writes a second; docs/scale.md),
/// and each selection of the minute stays at [`MAX_SHARDS`] queries. A constant, not a
/// setting: the API's create and the dispatcher's selection must agree on it (a reader with a
/// lower ceiling than the writer would never query some reservations' shards).
pub const MAX_CALLS_PER_MINUTE: u32 = 160_000;
/// At most this many shards per minute: [`MAX_CALLS_PER_MINUTE`] at [`CALLS_PER_SHARD`].
pub const MAX_SHARDS: u32 = MAX_CALLS_PER_MINUTE / CALLS_PER_SHARD;

/// How many shards a minute with `count` reservations made for it has, for the writer choosing
/// a new reservation's shard and the readers querying alike: shard 0, and one more per whole
/// [`CALLS_PER_SHARD`] of the count capped at [`MAX_CALLS_PER_MINUTE`], at most [`MAX_SHARDS`].
/// So each raise of the count ([`COUNT_STEP`]) adds a shard, the first one included. It never
/// shrinks as the count grows, so every reservation is in a shard that a later reader queries;
/// and it is never below `ceil(count / CALLS_PER_SHARD)`, what counts that began at 1 (a
/// minute's first create, before 2026-11-28) were read with.
pub fn shards_for(count: u32) -> u32 {
    (count.min(MAX_CALLS_PER_MINUTE) / CALLS_PER_SHARD + 1).min(MAX_SHARDS)
}

/// FNV-1a of the call id: stable across processes and versions, unlike the standard library's
/// hasher.
fn fnv1a(call_id: &CallId) -> u64 {
    call_id
        .as_str()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// The shard of `call_id` among `shards` (the low end of [`fnv1a`]: the hash modulo `shards`).
pub fn shard_of(call_id: &CallId, shards: u32) -> u32 {
    (fnv1a(call_id) % u64::from(shards.max(1))) as u32
}

/// Whether the create of `call_id` raises its minute's count (by [`COUNT_STEP`]): one call id
/// in `COUNT_STEP`, decided by the call id alone, so every attempt of one create (a retry after
/// a lost reply, a client's repeat) decides alike. From the hash's top bits, not its low end
/// that [`shard_of`] takes: else, while a minute's shard count divides `COUNT_STEP`, every
/// counting create would land in its shard 0.
pub fn raises_count(call_id: &CallId) -> bool {
    (fnv1a(call_id) >> (u64::BITS - COUNT_STEP.trailing_zeros())) == 0
}

/// The index partition of a minute's shard: `"2026-01-01T22:00Z#7"`.
pub fn shard_key(minute: &str, shard: u32) -> String {
    format!("{minute}#{shard}")
}

/// One worker's share of every minute's shards: part `index` of `of` (`0 <= index < of`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub index: u32,
    pub of: u32,
}

impl Part {
    /// All of every minute (one run does everything).
    pub const WHOLE: Part = Part { index: 0, of: 1 };

    /// `None` unless `index < of`.
    pub fn new(index: u32, of: u32) -> Option<Part> {
        (index < of).then_some(Part { index, of })
    }

    /// This part's shards of a minute that has `shards`: every `of`-th from `index`, so the parts
    /// of one split cover every shard once and share the crowded first ones (a part may have
    /// none when there are fewer shards than parts).
    pub fn shards(self, shards: u32) -> StepBy<Range<u32>> {
        (self.index.min(shards)..shards).step_by(self.of.max(1) as usize)
    }
}

/// What the dispatcher needs of a reservation (what the bucket index carries): the push's
/// contents and where to send it. Its state is the claim's business, not the selection's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueCall {
    pub call_id: CallId,
    pub device_id: DeviceId,
    pub scheduled_at: ScheduledAt,
    /// When its next push is due (`Reservation::due_at`): `scheduled_at`, or the end of a
    /// confirmation wait.
    pub due_at: chrono::DateTime<chrono::Utc>,
    pub caller_name: Option<String>,
}

impl From<&Reservation> for DueCall {
    fn from(r: &Reservation) -> DueCall {
        DueCall {
            call_id: r.call_id.clone(),
            device_id: r.device_id.clone(),
            scheduled_at: r.scheduled_at,
            due_at: r.due_at,
            caller_name: r.caller_name.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One call id in [`COUNT_STEP`] counts, and each count adds one shard; the counting ones
    /// spread over a minute's shards as the others do.
    #[test]
    fn one_create_in_a_step_counts_and_adds_one_shard() {
        for k in 0..1_000 {
            assert_eq!(shards_for(k * COUNT_STEP), k + 1);
            // A count that began at 1 (before 2026-11-28) is read as it was then.
            assert_eq!(
                shards_for(1 + k * COUNT_STEP),
                (1 + k * COUNT_STEP).div_ceil(32)
            );
        }
        let ids: Vec<CallId> = (0..64_000).map(|_| CallId::generate()).collect();
        let counting: Vec<&CallId> = ids.iter().filter(|c| raises_count(c)).collect();
        // 2,000 expected; the standard deviation is about 44.
        assert!(
            (1_750..2_250).contains(&counting.len()),
            "{}",
            counting.len()
        );
        let copy = |c: &CallId| CallId::from_stored(c.as_str().to_owned());
        assert!(
            ids.iter()
                .all(|c| raises_count(c) == raises_count(&copy(c))),
            "decided by the call id alone"
        );
        let mut per = [0u32; 8];
        for c in &counting {
            per[shard_of(c, 8) as usize] += 1;
        }
        // About 250 each; all in shard 0 if the two took the same bits.
        assert!(per.iter().all(|&n| (150..350).contains(&n)), "{per:?}");
    }

    #[test]
    fn shards_grow_with_the_count_and_stay_bounded() {
        assert_eq!(shards_for(0), 1);
        assert_eq!(shards_for(31), 1);
        assert_eq!(shards_for(32), 2);
        assert_eq!(shards_for(33), 2);
        assert_eq!(shards_for(100_000), 3_126);
        assert_eq!(shards_for(u32::MAX), MAX_SHARDS);
    }

    #[test]
    fn a_minutes_shards_stop_growing_at_the_ceiling_and_still_cover_every_reservation() {
        assert_eq!(MAX_SHARDS, 5_000);
        assert_eq!(shards_for(MAX_CALLS_PER_MINUTE), MAX_SHARDS);
        assert_eq!(shards_for(MAX_CALLS_PER_MINUTE + 1), MAX_SHARDS);
        assert_eq!(shards_for(1_000_000), MAX_SHARDS);
        assert_eq!(shards_for(u32::MAX), MAX_SHARDS, "an inflated count");
        // A reservation made at any count lies in a shard of every later (larger) count.
        let counts = [
            1,
            32,
            33,
            10_000,
            159_999,
            160_000,
            160_001,
            1_000_000,
            u32::MAX,
        ];
        for (i, &made) in counts.iter().enumerate() {
            let call = CallId::generate();
            for &read in &counts[i..] {
                assert!(shards_for(made) <= shards_for(read), "{made} then {read}");
                assert!(shard_of(&call, shards_for(made)) < shards_for(read));
            }
        }
    }

    /// Past the ceiling further calls spread evenly over its shards: the busiest one of a
    /// minute made call by call grows by about one per [`MAX_SHARDS`] calls more.
    #[test]
    fn calls_beyond_the_ceiling_spread_over_its_shards() {
        let n = MAX_CALLS_PER_MINUTE + 100_000;
        let mut per = vec![0u32; MAX_SHARDS as usize];
        for count in 1..=n {
            per[shard_of(&CallId::generate(), shards_for(count)) as usize] += 1;
        }
        let max = *per.iter().max().unwrap();
        // About 32 × (1 + ln 5,000) ≈ 305 by the ceiling, plus 100,000 / 5,000 = 20.
        assert!(max < 400, "busiest shard {max}");
    }

    /// A minute's calls made one after the other, each into a shard of the count then: the
    /// busiest shard (one of the first) stays at a few hundred, as the module says.
    #[test]
    fn a_minute_made_call_by_call_keeps_its_busiest_shard_at_a_few_hundred() {
        for (n, bound) in [(10_000u32, 260), (100_000, 360)] {
            let mut per = vec![0u32; shards_for(n) as usize];
            for count in 1..=n {
                per[shard_of(&CallId::generate(), shards_for(count)) as usize] += 1;
            }
            let max = *per.iter().max().unwrap();
            assert!(max < bound, "{n} calls: busiest shard {max}");
            if n < 100_000 {
                continue;
            }
            // Each part of a 20-way split gets about its share.
            let part = |i| {
                Part::new(i, 20)
                    .unwrap()
                    .shards(shards_for(n))
                    .map(|k| per[k as usize])
                    .sum::<u32>()
            };
            let (min, most) = (0..20)
                .map(part)
                .fold((u32::MAX, 0), |(lo, hi), p| (lo.min(p), hi.max(p)));
            assert!(
                most < min + min / 4,
                "{n} calls: parts from {min} to {most}"
            );
        }
    }

    /// As above with the count the stores keep, an estimate (the first 1, then
    /// [`COUNT_STEP`] for each call id that counts): the busiest shard grows by the calls made
    /// while the count lags (shard 0 takes every call before the first raise, 32 on average,
    /// a few hundred once in thousands of minutes), still well under a partition's 1,000
    /// writes a second. Call ids from a fixed sequence, so the figures are the same each run.
    #[test]
    fn a_minute_counted_by_estimate_keeps_its_busiest_shard_at_a_few_hundred() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next_id = || {
            // splitmix64, twice: 32 hex digits as CallId::generate gives.
            let mut half = || {
                seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = seed;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^ (z >> 31)
            };
            CallId::from_stored(format!("{:016x}{:016x}", half(), half()))
        };
        for (n, bound) in [(10_000u32, 300), (100_000, 400)] {
            let (mut count, mut raises) = (0u32, 0u32);
            let mut per = vec![0u32; MAX_SHARDS as usize];
            for _ in 0..n {
                let call = next_id();
                per[shard_of(&call, shards_for(count)) as usize] += 1;
                if raises_count(&call) {
                    count += COUNT_STEP;
                    raises += 1;
                }
            }
            let max = *per.iter().max().unwrap();
            assert!(max < bound, "{n} calls: busiest shard {max}");
            // The estimate within 5 standard deviations: 32 × sqrt(n × 1/32 × 31/32), about
            // 560 for 10,000 calls, 1,760 for 100,000.
            let p = 1.0 / f64::from(COUNT_STEP);
            let sd = f64::from(COUNT_STEP) * (f64::from(n) * p * (1.0 - p)).sqrt();
            let off = (f64::from(count) - f64::from(n)).abs();
            assert!(
                off < 5.0 * sd,
                "{n} calls counted {count} ({raises} raises)"
            );
        }
    }

    #[test]
    fn a_call_keeps_its_shard_and_the_readers_count_covers_it() {
        let call = CallId::from_stored("0123456789abcdef0123456789abcdef".into());
        assert_eq!(shard_of(&call, 7), shard_of(&call, 7));
        assert_eq!(shard_of(&call, 1), 0);
        // Made when the minute had 3 shards: in one of 0..3, which a reader with more queries.
        assert!(shard_of(&call, 3) < shards_for(100));
        assert_eq!(shard_key("2026-01-01T22:00Z", 7), "2026-01-01T22:00Z#7");
    }

    #[test]
    fn the_parts_of_a_split_cover_every_shard_once() {
        for of in 1..=9 {
            for shards in [1, 2, 3, 8, 250, 4096] {
                let mut seen = Vec::new();
                for index in 0..of {
                    seen.extend(Part::new(index, of).unwrap().shards(shards));
                }
                seen.sort_unstable();
                assert_eq!(seen, (0..shards).collect::<Vec<_>>(), "{shards} in {of}");
            }
        }
        assert!(Part::WHOLE.shards(5).eq(0..5));
        assert!(Part::new(1, 3).unwrap().shards(8).eq([1, 4, 7]));
        assert_eq!(Part::new(3, 3), None);
    }
}
