//! The `Clock` port, so time-dependent logic is tested without sleeping.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

#[async_trait]
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
    /// Returns at `deadline` (at once if it has passed).
    async fn sleep_until(&self, deadline: DateTime<Utc>);
}

pub struct SystemClock;

#[async_trait]
impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    async fn sleep_until(&self, deadline: DateTime<Utc>) {
        if let Ok(wait) = (deadline - Utc::now()).to_std() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// The system clock moved by a fixed offset: the fixture test's year-later pass runs the real
/// function binaries a year ahead with it (`KOE_TEST_CLOCK_OFFSET_DAYS`, honoured by debug
/// builds only: a deployed, release-built function never reads it).
pub struct OffsetClock(pub chrono::Duration);

#[async_trait]
impl Clock for OffsetClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.0
    }

    async fn sleep_until(&self, deadline: DateTime<Utc>) {
        if let Ok(wait) = (deadline - self.now()).to_std() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// A test's instant from RFC 3339 text (`"2026-01-01T00:00:20Z"`).
#[cfg(test)]
pub(crate) fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}
