//! How POST /internal/dispatch and a wake (`dispatch::wake`) start a run without waiting for it.
//!
//! A run may last up to about 70 s, longer than API Gateway's 30 s integration timeout, so the HTTP
//! route answers 202 and hands the run on: in a Lambda, by publishing a "dispatch requested"
//! event to the stack's EventBridge bus, whose rule invokes the dispatch function
//! asynchronously (the same function that the every-minute schedule invokes); in koe-local, by
//! waking the in-process dispatcher loop.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use crate::domain::due::Part;
use crate::domain::reservation::rfc3339_millis;
use crate::event_bus::eventbridge::Publisher;

/// EventBridge `source` of a requested run (the template's rule matches it).
pub const SOURCE: &str = "koe.dispatch";
/// EventBridge `detail-type` of a requested run.
pub const DETAIL_TYPE: &str = "Koe Dispatch Requested";
/// EventBridge `detail-type` of a wake (`dispatch::wake`), detail `{"dueAt", "until"}`.
pub const WAKE_DETAIL_TYPE: &str = "Koe Dispatch Wake";
/// EventBridge `detail-type` of a part of a split minute (`fan_out`), detail `{"part", "of"}`.
pub const PART_DETAIL_TYPE: &str = "Koe Dispatch Part";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TriggerError(pub String);

/// The most the hand-off of a requested run may take (one EventBridge PutEvents).
pub const TRIGGER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

#[async_trait]
pub trait DispatchTrigger: Send + Sync {
    /// Asks for one dispatch run soon; returns once the request is handed on.
    async fn request_run(&self) -> Result<(), TriggerError>;

    /// Asks for one run soon that stays until `until`, because a call is due at `due_at` and no
    /// run is sure to cover it (`dispatch::wake`); returns once the request is handed on. By
    /// default a requested run.
    async fn wake(
        &self,
        _due_at: DateTime<Utc>,
        _until: DateTime<Utc>,
    ) -> Result<(), TriggerError> {
        self.request_run().await
    }

    /// Asks for one run of each of `parts` at once, each in an invocation of its own; returns
    /// once all are handed on (an error if any is not). By default it cannot: the coordinating
    /// run then takes the whole minute.
    async fn hand_out(&self, _parts: &[Part]) -> Result<(), TriggerError> {
        Err(TriggerError("this trigger hands out no parts".into()))
    }
}

/// What koe-local's dispatcher loop is asked for: runs, and wakes with how long they stay.
/// Without a listener a request waits until one starts listening.
#[derive(Default)]
pub struct RunRequests {
    notify: Notify,
    /// The wakes not yet taken, by the time their runs stay until.
    wakes: std::sync::Mutex<Vec<DateTime<Utc>>>,
}

impl RunRequests {
    /// The next request: `Some(until)` for wakes (those asked for meanwhile taken together:
    /// one run that stays until the latest), `None` for a requested run.
    pub async fn next(&self) -> Option<DateTime<Utc>> {
        self.notify.notified().await;
        let mut wakes = self.wakes.lock().unwrap_or_else(|p| p.into_inner());
        wakes.drain(..).max()
    }
}

/// Wakes an in-process loop (koe-local's dispatcher loop listens on `requests`).
pub struct InProcessTrigger {
    pub requests: Arc<RunRequests>,
}

#[async_trait]
impl DispatchTrigger for InProcessTrigger {
    async fn request_run(&self) -> Result<(), TriggerError> {
        self.requests.notify.notify_one();
        Ok(())
    }

    async fn wake(&self, _due_at: DateTime<Utc>, until: DateTime<Utc>) -> Result<(), TriggerError> {
        let requests = &self.requests;
        requests
            .wakes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(until);
        requests.notify.notify_one();
        Ok(())
    }

    /// One process has one CPU budget: its run takes the whole minute.
    async fn hand_out(&self, _: &[Part]) -> Result<(), TriggerError> {
        Err(TriggerError(
            "the in-process loop runs whole minutes".into(),
        ))
    }
}

/// Publishes a "dispatch requested" event (detail `{"requestedAt"}`) to an EventBridge bus.
pub struct EventBridgeTrigger {
    publisher: Publisher,
}

impl EventBridgeTrigger {
    pub fn new(bus_name: String, load: crate::platform::aws::LoadConfig) -> EventBridgeTrigger {
        EventBridgeTrigger {
            publisher: Publisher::new(bus_name, load),
        }
    }
}

#[async_trait]
impl DispatchTrigger for EventBridgeTrigger {
    async fn request_run(&self) -> Result<(), TriggerError> {
        let detail = serde_json::json!({ "requestedAt": rfc3339_millis(chrono::Utc::now()) });
        self.publisher
            .put(SOURCE, DETAIL_TYPE, detail.to_string())
            .await
            .map_err(|e| TriggerError(e.0))
    }

    async fn wake(&self, due_at: DateTime<Utc>, until: DateTime<Utc>) -> Result<(), TriggerError> {
        let detail = serde_json::json!({
            "dueAt": rfc3339_millis(due_at),
            "until": rfc3339_millis(until),
        });
        self.publisher
            .put(SOURCE, WAKE_DETAIL_TYPE, detail.to_string())
            .await
            .map_err(|e| TriggerError(e.0))
    }

    async fn hand_out(&self, parts: &[Part]) -> Result<(), TriggerError> {
        let puts = parts.iter().map(|part| {
            let detail = serde_json::json!({ "part": part.index, "of": part.of });
            self.publisher
                .put(SOURCE, PART_DETAIL_TYPE, detail.to_string())
        });
        for put in futures_util::future::join_all(puts).await {
            put.map_err(|e| TriggerError(e.0))?;
        }
        Ok(())
    }
}

/// Until when a wake's run stays (its detail's `until`), if the detail carries it.
pub fn until_of(detail: &serde_json::Value) -> Option<DateTime<Utc>> {
    let until = detail.get("until")?.as_str()?;
    Some(
        DateTime::parse_from_rfc3339(until)
            .ok()?
            .with_timezone(&Utc),
    )
}

/// A part event's detail (`{"part": 1, "of": 3}`), if it is one.
pub fn part_of(detail: &serde_json::Value) -> Option<Part> {
    let number = |key: &str| u32::try_from(detail.get(key)?.as_u64()?).ok();
    Part::new(number("part")?, number("of")?)
}
