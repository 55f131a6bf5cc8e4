//! The daily limit of round-1 agent calls per device: days are Japan days (00:00 JST turns
//! them, whatever the user's own time zone), counted by one atomic conditional update.

use chrono::{DateTime, Utc};

use crate::domain::device::DeviceId;
use crate::domain::usage_day::UsageDay;
use crate::store::UsageOutcome;
use crate::store::UsageStore;

/// What the counter said about one round-1 request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowance {
    /// Counted; this many uses are left today.
    Counted { remaining: u32 },
    /// The day's limit was already reached: refuse, retry after this many seconds. Not counted.
    Exceeded { retry_after_secs: u64 },
    /// The counter failed: allowed anyway (fail-open), remaining unknown.
    Unknown,
}

/// Counts one use for `device` today, unless the limit is reached. A store failure allows the
/// request (fail-open) with a warning: an outage of the counter must not take agent mode down.
pub async fn count_use(
    store: &dyn UsageStore,
    device: &DeviceId,
    device_hash: &str,
    limit: u32,
    now: DateTime<Utc>,
) -> Allowance {
    let day = UsageDay::of(now);
    match store
        .count_agent_use(device, &day.key, limit, day.expire_at())
        .await
    {
        Ok(UsageOutcome::Counted { count }) => Allowance::Counted {
            remaining: limit.saturating_sub(count),
        },
        Ok(UsageOutcome::LimitReached) => Allowance::Exceeded {
            retry_after_secs: day.retry_after_secs(now),
        },
        Err(e) => {
            tracing::warn!(
                device = device_hash,
                error = %e,
                "agent usage counter failed: request allowed uncounted (fail-open)"
            );
            Allowance::Unknown
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::platform::clock::utc as at;

    #[test]
    fn the_day_is_the_japan_date_not_the_utc_date() {
        // 2026-03-01 20:00 UTC is already 2026-03-02 05:00 in Tokyo.
        assert_eq!(UsageDay::of(at("2026-03-01T20:00:00Z")).key, "2026-03-02");
        assert_eq!(UsageDay::of(at("2026-03-01T14:59:59Z")).key, "2026-03-01");
        assert_eq!(UsageDay::of(at("2026-03-01T15:00:00Z")).key, "2026-03-02");
        // UTC midnight is 09:00 in Tokyo: no turn there.
        assert_eq!(
            UsageDay::of(at("2026-03-01T23:59:59Z")).key,
            UsageDay::of(at("2026-03-02T00:00:00Z")).key
        );
    }

    #[test]
    fn the_day_turns_at_jst_midnight() {
        let before = UsageDay::of(at("2026-03-01T23:59:59+09:00"));
        let after = UsageDay::of(at("2026-03-02T00:00:00+09:00"));
        assert_eq!(before.key, "2026-03-01");
        assert_eq!(after.key, "2026-03-02");
        assert_eq!(before.ends_at, at("2026-03-02T00:00:00+09:00"));
        assert_eq!(after.ends_at, at("2026-03-03T00:00:00+09:00"));
        // Year and month ends too.
        assert_eq!(UsageDay::of(at("2026-12-31T15:00:00Z")).key, "2027-01-01");
        assert_eq!(
            UsageDay::of(at("2028-02-29T12:00:00+09:00")).key,
            "2028-02-29"
        );
    }

    #[test]
    fn expire_at_is_the_end_of_the_japan_day_plus_7_days() {
        let day = UsageDay::of(at("2026-03-01T12:00:00+09:00"));
        assert_eq!(
            day.expire_at(),
            at("2026-03-09T00:00:00+09:00").timestamp(),
            "2026-03-02T00:00 JST + 7 days"
        );
        assert_eq!(
            UsageDay::of(at("2026-03-01T23:59:59.999+09:00")).expire_at(),
            day.expire_at()
        );
    }

    #[test]
    fn retry_after_counts_whole_seconds_to_the_next_jst_midnight() {
        let cases = [
            ("2026-03-01T23:59:59+09:00", 1),
            ("2026-03-01T23:59:59.001+09:00", 1),
            ("2026-03-01T23:59:58.500+09:00", 2),
            ("2026-03-02T00:00:00+09:00", 86_400),
            ("2026-03-01T12:34:56+09:00", 11 * 3600 + 25 * 60 + 4),
            ("2026-03-01T20:00:00Z", 19 * 3600),
        ];
        for (now, expected) in cases {
            let now = at(now);
            assert_eq!(UsageDay::of(now).retry_after_secs(now), expected, "{now}");
        }
    }
}
