//! The Japan day an instant falls in: the day of the usage counters (the agent's daily limit
//! per device, the daily model-token ceilings), which turns at 00:00 JST whatever the user's
//! own time zone.

use chrono::{DateTime, Duration, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;

/// The limit's clock: the day turns at 00:00 in Tokyo.
pub const LIMIT_TIMEZONE: Tz = chrono_tz::Asia::Tokyo;
/// How long a counter outlives its day (DynamoDB deletes it by TTL on `expireAt`).
pub const COUNTER_RETENTION: Duration = Duration::days(7);

/// The Japan day an instant falls in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageDay {
    /// `YYYY-MM-DD` in JST: the counter's sort key.
    pub key: String,
    /// The next 00:00 JST: when this day's counter stops counting.
    pub ends_at: DateTime<Utc>,
}

impl UsageDay {
    pub fn of(now: DateTime<Utc>) -> UsageDay {
        let date = now.with_timezone(&LIMIT_TIMEZONE).date_naive();
        let next = date
            .succ_opt()
            .expect("dates this side of year 262143")
            .and_time(NaiveTime::MIN);
        // Tokyo has no daylight saving time: every local midnight exists exactly once.
        let ends_at = LIMIT_TIMEZONE
            .from_local_datetime(&next)
            .earliest()
            .expect("midnight exists in Asia/Tokyo")
            .with_timezone(&Utc);
        UsageDay {
            key: date.format("%Y-%m-%d").to_string(),
            ends_at,
        }
    }

    /// The counter's `expireAt` (epoch seconds): the end of this Japan day plus 7 days.
    pub fn expire_at(&self) -> i64 {
        (self.ends_at + COUNTER_RETENTION).timestamp()
    }

    /// `Retry-After` for a refusal at `now`: whole seconds until the day turns, rounded up, so
    /// a client that waits exactly that long is in the next day (at least 1).
    pub fn retry_after_secs(&self, now: DateTime<Utc>) -> u64 {
        let millis = (self.ends_at - now).num_milliseconds().max(1);
        (millis as u64).div_ceil(1000)
    }
}
