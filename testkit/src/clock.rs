//! Clocks for tests: one that moves only when told ([`ManualClock`]), and tokio's (paused) time as
//! a wall clock ([`TokioClock`]), so time-dependent behaviour is tested without sleeping.

use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use koe::platform::clock::Clock;
use tokio::sync::watch;

pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
    ticks: watch::Sender<DateTime<Utc>>,
}

impl ManualClock {
    pub fn at(now: DateTime<Utc>) -> ManualClock {
        ManualClock {
            now: Mutex::new(now),
            ticks: watch::channel(now).0,
        }
    }

    /// A clock at an RFC 3339 instant.
    pub fn at_rfc3339(now: &str) -> ManualClock {
        ManualClock::at(
            DateTime::parse_from_rfc3339(now)
                .expect("RFC 3339 instant")
                .with_timezone(&Utc),
        )
    }

    pub fn set(&self, now: DateTime<Utc>) {
        *self.now.lock().unwrap() = now;
        self.ticks.send_replace(now);
    }

    pub fn advance(&self, by: Duration) {
        let now = self.now() + by;
        self.set(now);
    }
}

#[async_trait]
impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap()
    }

    async fn sleep_until(&self, deadline: DateTime<Utc>) {
        let mut ticks = self.ticks.subscribe();
        let _ = ticks.wait_for(|now| *now >= deadline).await;
    }
}

/// Tokio's time read as a wall clock: `at` when made, then moving with `tokio::time` (paused in
/// a test, so a run of many seconds takes none, every component on the same time: the
/// dispatcher through this clock, `HeldStore`, `LimitedApns` and pushes' latency directly).
pub struct TokioClock {
    start: tokio::time::Instant,
    at: DateTime<Utc>,
}

impl TokioClock {
    pub fn at(at: DateTime<Utc>) -> TokioClock {
        TokioClock {
            start: tokio::time::Instant::now(),
            at,
        }
    }

    /// The tokio instant at which this clock reads `t`.
    pub fn instant(&self, t: DateTime<Utc>) -> tokio::time::Instant {
        let offset = (t - self.at)
            .to_std()
            .expect("at or after the clock's start");
        self.start + offset
    }
}

#[async_trait]
impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        self.at + Duration::from_std(self.start.elapsed()).expect("a short test")
    }

    async fn sleep_until(&self, deadline: DateTime<Utc>) {
        if let Ok(wait) = (deadline - self.now()).to_std() {
            tokio::time::sleep(wait).await;
        }
    }
}
