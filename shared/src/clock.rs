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
