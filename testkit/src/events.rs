//! An `EventBus` that records notifications and can be told to fail.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use koe::event_bus::{ErrorNotification, EventBus, PublishError};

#[derive(Default)]
pub struct RecordingEventBus {
    published: Mutex<Vec<ErrorNotification>>,
    fail: AtomicBool,
}

impl RecordingEventBus {
    pub fn published(&self) -> Vec<ErrorNotification> {
        self.published.lock().unwrap().clone()
    }

    /// From now on every publish fails (after being recorded as attempted).
    pub fn fail_from_now(&self) {
        self.fail.store(true, Ordering::SeqCst);
    }
}

#[async_trait]
impl EventBus for RecordingEventBus {
    async fn publish(&self, n: &ErrorNotification) -> Result<(), PublishError> {
        self.published.lock().unwrap().push(n.clone());
        if self.fail.load(Ordering::SeqCst) {
            return Err(PublishError("bus refused (test)".into()));
        }
        Ok(())
    }
}
