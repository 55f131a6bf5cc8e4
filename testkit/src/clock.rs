//! A clock that moves only when told, so time-dependent behaviour is tested without sleeping.

use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use koe::clock::Clock;
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
