//! Stand-ins a test builds by hand: a store that always fails, and step ids as round 1 issues.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use koe::domain::device::DeviceId;
use koe::store::{Call, Op, StoreError, StoreLayer};

use super::TEST_STEP_KEY;

/// A store whose every operation fails, as DynamoDB does in an outage: handlers must answer 503.
pub struct FailingStore;

#[async_trait]
impl StoreLayer for FailingStore {
    /// None: no request gets past the layer.
    type Inner = FailingStore;

    fn inner(&self) -> &FailingStore {
        self
    }

    async fn around<T, E>(&self, _: Op<'_>, _: Call<'_, T, E>) -> Result<T, E>
    where
        T: Send,
        E: From<StoreError> + Send,
    {
        Err(StoreError::new("store down (test)").into())
    }
}

/// Step ids as round 1 issues them for `device` at `now` (a plan of `steps` steps, signed with
/// [`TEST_STEP_KEY`], the device hashed with `salt`): for tests of round 2 that do not run a
/// round 1 first.
pub fn issued_step_ids_with(
    salt: &str,
    device: &str,
    steps: usize,
    now: DateTime<Utc>,
) -> Vec<String> {
    use koe::agent::binding::StepSigner;
    use koe::domain::agent::{Capability, PlanStep};
    let t = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00+09:00").expect("valid");
    let mut plan: Vec<PlanStep> = (0..steps)
        .map(|_| PlanStep {
            id: String::new(),
            tool: Capability::all().next().expect("a tool"),
            from: t,
            to: t + chrono::Duration::days(1),
        })
        .collect();
    let device = DeviceId::parse("deviceId", device).expect("a valid device id");
    StepSigner::new(koe::platform::config::Secret::new(TEST_STEP_KEY)).sign_plan(
        &mut plan,
        &device.log_hash(salt),
        now,
    );
    plan.into_iter().map(|s| s.id).collect()
}

/// One step id of a fresh plan, as round 1 issues it for `device` at `now` with the default
/// `DEVICE_HASH_SALT` (`koe`).
pub fn issued_step_id(device: &str, now: DateTime<Utc>) -> String {
    issued_step_ids_with("koe", device, 1, now).remove(0)
}

/// Round 2's `results`, one per tool of `koe::domain::agent::tools::TOOLS` (under `step_ids`,
/// in order), each with two items: `text` and the field's name (cut to its cap) in every
/// personal text field, `times` in its date-times in turn, `true` in its booleans. What the log
/// audit sends, so that a new tool's personal fields carry sentinels without the audit naming
/// them.
pub fn tool_results(step_ids: &[String], text: &str, times: [&str; 2]) -> serde_json::Value {
    use koe::domain::agent::tools::{Kind, TOOLS};
    assert!(step_ids.len() >= TOOLS.len(), "a step id per tool");
    let results: Vec<serde_json::Value> = TOOLS
        .iter()
        .zip(step_ids)
        .map(|(tool, id)| {
            let item = |n: usize| {
                let mut dates = times.iter().cycle();
                let fields: serde_json::Map<String, serde_json::Value> = tool
                    .item
                    .iter()
                    .map(|field| {
                        let value = match field.kind {
                            Kind::Text(max) if field.personal => {
                                let full = format!("{text}-{}-{}-{n}", tool.name, field.name);
                                serde_json::json!(full.chars().take(max).collect::<String>())
                            }
                            Kind::Text(_) => serde_json::json!("x"),
                            Kind::DateTime if field.personal => serde_json::json!(dates.next()),
                            Kind::DateTime => serde_json::json!("2026-01-01T00:00:00+09:00"),
                            Kind::Bool => serde_json::json!(true),
                        };
                        (field.name.to_owned(), value)
                    })
                    .collect();
                serde_json::Value::Object(fields)
            };
            serde_json::json!({"stepId": id, "tool": tool.name,
                "output": {tool.list: [item(1), item(2)]}})
        })
        .collect();
    serde_json::Value::Array(results)
}
