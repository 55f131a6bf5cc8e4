//! Grouping of repeated notifications, so a flood of one error (or of GET /api/error) cannot flood
//! the team chat.
//!
//! Every notification is still published (the contract: every 5xx publishes one event); what
//! changes is whether it is for the team chat. Per process (a Lambda container, koe-local), per
//! function, route and code: the first notification opens a window of [`GROUP_WINDOW`] and goes
//! to the chat; the same notification again within the window is published with
//! `grouped: true`, which the template's rule does not deliver; the first one after the window
//! goes to the chat again with `repeats` = how many were grouped since the last delivered one.
//! So each container sends at most one chat message per error kind per window; across containers
//! that times the function's concurrency (see docs/chat.md, "Error notifications"), and the API
//! destination's rate limit bounds the webhook calls. Every event stays on the bus (for an
//! archive or another rule) with its count.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{ErrorNotification, EventBus, PublishError};
use crate::platform::clock::Clock;

/// How long one published notification stands for its repeats.
pub const GROUP_WINDOW: chrono::Duration = chrono::Duration::seconds(60);

/// What one kind of notification (function, route, code) has had since its last publication.
struct Window {
    opened: DateTime<Utc>,
    held_back: u32,
}

/// An [`EventBus`] that groups repeats before handing notifications to `inner`.
pub struct Grouped {
    inner: Arc<dyn EventBus>,
    clock: Arc<dyn Clock>,
    windows: Mutex<HashMap<(String, String, &'static str), Window>>,
}

impl Grouped {
    pub fn new(inner: Arc<dyn EventBus>, clock: Arc<dyn Clock>) -> Grouped {
        Grouped {
            inner,
            clock,
            windows: Mutex::new(HashMap::new()),
        }
    }
}

#[async_trait]
impl EventBus for Grouped {
    async fn publish(&self, notification: &ErrorNotification) -> Result<(), PublishError> {
        let now = self.clock.now();
        let key = (
            notification.function.clone(),
            notification.route.clone(),
            notification.code,
        );
        let repeats = {
            let mut windows = self.windows.lock().expect("not poisoned");
            match windows.get_mut(&key) {
                Some(window) if now - window.opened < GROUP_WINDOW => {
                    window.held_back += 1;
                    None
                }
                Some(window) => {
                    let repeats = window.held_back;
                    *window = Window {
                        opened: now,
                        held_back: 0,
                    };
                    Some(repeats)
                }
                None => {
                    windows.insert(
                        key,
                        Window {
                            opened: now,
                            held_back: 0,
                        },
                    );
                    Some(0)
                }
            }
        };
        let mut grouped = notification.clone();
        grouped.grouped = repeats.is_none();
        grouped.repeats = repeats.unwrap_or(0);
        self.inner.publish(&grouped).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Recording(Mutex<Vec<ErrorNotification>>);

    #[async_trait]
    impl EventBus for Recording {
        async fn publish(&self, n: &ErrorNotification) -> Result<(), PublishError> {
            self.0.lock().unwrap().push(n.clone());
            Ok(())
        }
    }

    struct Fixed(Mutex<DateTime<Utc>>);

    #[async_trait]
    impl Clock for Fixed {
        fn now(&self) -> DateTime<Utc> {
            *self.0.lock().unwrap()
        }
        async fn sleep_until(&self, _: DateTime<Utc>) {}
    }

    fn notification(code: &'static str) -> ErrorNotification {
        ErrorNotification {
            function: "koe-error-test".into(),
            route: "/api/error".into(),
            code,
            status: 500,
            request_id: "r".into(),
            time: Utc::now(),
            repeats: 0,
            grouped: false,
        }
    }

    #[tokio::test]
    async fn repeats_within_a_minute_are_grouped_and_counted_into_the_next_one() {
        let inner = Arc::new(Recording::default());
        let start = Utc::now();
        let clock = Arc::new(Fixed(Mutex::new(start)));
        let bus = Grouped::new(inner.clone(), clock.clone());
        for _ in 0..100 {
            bus.publish(&notification("TEST_ERROR")).await.unwrap();
        }
        bus.publish(&notification("PROVIDER_ERROR")).await.unwrap();
        // (What the chat gets: the events not grouped.)
        let codes = |inner: &Recording| {
            inner
                .0
                .lock()
                .unwrap()
                .iter()
                .filter(|n| !n.grouped)
                .map(|n| (n.code, n.repeats))
                .collect::<Vec<_>>()
        };
        assert_eq!(inner.0.lock().unwrap().len(), 101, "every one is published");
        assert_eq!(
            codes(&inner),
            [("TEST_ERROR", 0), ("PROVIDER_ERROR", 0)],
            "one per kind"
        );
        *clock.0.lock().unwrap() = start + chrono::Duration::seconds(59);
        bus.publish(&notification("TEST_ERROR")).await.unwrap();
        assert_eq!(codes(&inner).len(), 2, "still within the window");
        *clock.0.lock().unwrap() = start + chrono::Duration::seconds(60);
        bus.publish(&notification("TEST_ERROR")).await.unwrap();
        assert_eq!(codes(&inner)[2], ("TEST_ERROR", 100), "99 + 1 held back");
        *clock.0.lock().unwrap() = start + chrono::Duration::seconds(200);
        bus.publish(&notification("TEST_ERROR")).await.unwrap();
        assert_eq!(codes(&inner)[3], ("TEST_ERROR", 0));
    }
}
