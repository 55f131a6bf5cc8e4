//! Fixtures whose content depends on something outside the file:
//! - `events/create-call.json` reserves a time that POST /calls accepts only between 10 seconds
//!   and 30 days ahead, so a committed date goes stale. The committed file keeps everything else
//!   (headers, device, caller name); [`create_call`] gives it a `scheduledAt` that is valid
//!   relative to a given "now".
//! - `events/agent-round2.json` answers the steps round 1 planned, by the ids round 1 gave them
//!   (the server chooses step ids; the app echoes them); [`agent_round2`] puts the ids of a
//!   given round 1 answer into it.
//!
//! The `fixture` binary prints them:
//!
//! ```sh
//! cargo run -q -p koe-testkit --bin fixture -- create-call > /tmp/create-call.json
//! cargo run -q -p koe-testkit --bin fixture -- agent-round2 < /tmp/round1-answer.json
//! ```

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, FixedOffset, NaiveTime, SecondsFormat, Utc};
use serde_json::Value;

use crate::template::repo_root;

/// What the stand-in OpenAI answers a chat fixture (`Route::fixture`'s text for the chat routes):
/// the fixture tests script it, the `standin-openai` binary answers it by default.
pub const REPLY: &str = "フィクスチャの返事";

/// `events/env.json` (sections of variables), as `sam local invoke --env-vars` reads it.
pub fn env_json() -> BTreeMap<String, BTreeMap<String, String>> {
    let text = std::fs::read_to_string(repo_root().join("events/env.json")).unwrap();
    serde_json::from_str(&text).expect("events/env.json: sections of string variables")
}

/// The value the fixtures expect for the secret behind each `<VAR>_SECRET_ARN`: what they send
/// (the agent key) or use, and "not-set" for the APNs key (the dispatcher's `PUSH_SENDER=auto`
/// then logs its pushes). The same values docs/local.md sets as plain variables for
/// cargo-lambda.
pub fn secret_value(arn_var: &str) -> &'static str {
    match arn_var {
        "OPENAI_API_KEY_SECRET_ARN" => "sk-local",
        "AGENT_API_KEYS_SECRET_ARN" => "example-agent-key",
        "DEVICE_HASH_SALT_SECRET_ARN" => "koe-local",
        "AGENT_STEP_KEY_SECRET_ARN" => "example-step-key-for-local-invocation-0123",
        "APNS_KEY_P8_SECRET_ARN" => koe::platform::secrets::NOT_SET,
        other => panic!("events/env.json names a secret the fixtures do not know: {other}"),
    }
}

/// Every secret `events/env.json` names by ARN (in any section), with its [`secret_value`].
pub fn secrets() -> BTreeMap<String, &'static str> {
    let mut secrets = BTreeMap::new();
    for section in env_json().values() {
        for (var, arn) in section.iter().filter(|(v, _)| v.ends_with("_SECRET_ARN")) {
            let value = secret_value(var);
            let held = secrets.insert(arn.clone(), value);
            assert!(
                held.is_none_or(|held| held == value),
                "events/env.json names {arn} for two different secrets"
            );
        }
    }
    secrets
}

/// The port of `events/env.json`'s `AWS_ENDPOINT_URL_SECRETS_MANAGER` (`http://host:port`).
pub fn secrets_manager_port() -> u16 {
    let url = &env_json()["Parameters"]["AWS_ENDPOINT_URL_SECRETS_MANAGER"];
    url.rsplit_once(':')
        .and_then(|(_, port)| port.trim_end_matches('/').parse().ok())
        .unwrap_or_else(|| panic!("events/env.json: no port in {url:?}"))
}

/// The fixtures `fixture` knows how to make: `create-call` (for now) and `agent-round2` (from
/// a round 1 answer on stdin).
pub const GENERATED: &[&str] = &["create-call", "agent-round2"];

/// The committed `events/<name>.json`, parsed.
pub fn committed(name: &str) -> Value {
    let path = repo_root().join(format!("events/{name}.json"));
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// The next 07:00 in Japan (UTC+09:00 all year, no daylight saving) at least an hour after
/// `now`, written with its +09:00 offset, as the app sends it.
pub fn next_morning_in_tokyo(now: DateTime<Utc>) -> DateTime<FixedOffset> {
    let tokyo = FixedOffset::east_opt(9 * 3600).expect("+09:00");
    let earliest = (now + Duration::hours(1)).with_timezone(&tokyo);
    let seven = NaiveTime::from_hms_opt(7, 0, 0).expect("07:00");
    let mut day = earliest.date_naive();
    loop {
        let at = day
            .and_time(seven)
            .and_local_timezone(tokyo)
            .single()
            .expect("a fixed offset has no gaps");
        if at >= earliest {
            return at;
        }
        day = day.succ_opt().expect("a next day");
    }
}

/// `events/create-call.json` with `scheduledAt` at [`next_morning_in_tokyo`] of `now`, the
/// request's time fields at `now` and `content-length` matching the new body.
pub fn create_call(now: DateTime<Utc>) -> Value {
    create_call_at(now, next_morning_in_tokyo(now))
}

/// `events/create-call.json` reserving `scheduled_at`, sent at `now`.
pub fn create_call_at(now: DateTime<Utc>, scheduled_at: DateTime<FixedOffset>) -> Value {
    let mut event = committed("create-call");
    let mut body: Value =
        serde_json::from_str(event["body"].as_str().expect("create-call.json has a body"))
            .expect("create-call.json's body is JSON");
    body["scheduledAt"] = Value::String(scheduled_at.to_rfc3339_opts(SecondsFormat::Secs, false));
    set_body(&mut event, &body);
    event["requestContext"]["time"] =
        Value::String(now.format("%d/%b/%Y:%H:%M:%S +0000").to_string());
    event["requestContext"]["timeEpoch"] = Value::from(now.timestamp_millis());
    event
}

/// `events/agent-round2.json` answering every step of `round1` (round 1's answer: its JSON
/// body, or the whole Lambda response holding it as `body`) by that step's id, each with the
/// committed file's calendar output. Errors name what `round1` lacks.
pub fn agent_round2(round1: &Value) -> Result<Value, String> {
    let answer = match round1.get("body").and_then(Value::as_str) {
        Some(text) => serde_json::from_str::<Value>(text)
            .map_err(|e| format!("round 1's body is not JSON: {e}"))?,
        None => round1.clone(),
    };
    let steps = answer["steps"]
        .as_array()
        .filter(|steps| !steps.is_empty())
        .ok_or("round 1's answer has no `steps`: it answered directly, so there is no round 2")?;
    let mut event = committed("agent-round2");
    let mut body: Value = serde_json::from_str(
        event["body"]
            .as_str()
            .expect("agent-round2.json has a body"),
    )
    .expect("agent-round2.json's body is JSON");
    let output = body["results"][0]["output"].clone();
    let mut results = Vec::new();
    for step in steps {
        let id = step["id"].as_str().ok_or("a step of round 1 has no `id`")?;
        let tool = step["tool"]
            .as_str()
            .ok_or("a step of round 1 has no `tool`")?;
        results.push(serde_json::json!({"stepId": id, "tool": tool, "output": output}));
    }
    body["results"] = Value::Array(results);
    set_body(&mut event, &body);
    Ok(event)
}

/// Puts `body` (compact JSON) into an API Gateway event, with a matching `content-length`.
fn set_body(event: &mut Value, body: &Value) {
    let body = serde_json::to_string(body).expect("JSON");
    event["headers"]["content-length"] = Value::String(body.len().to_string());
    event["body"] = Value::String(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(raw: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(raw)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn the_next_morning_is_at_least_an_hour_away() {
        for (now, expected) in [
            ("2026-11-23T12:00:00+09:00", "2026-11-24T07:00:00+09:00"),
            ("2026-11-23T05:59:59+09:00", "2026-11-23T07:00:00+09:00"),
            ("2026-11-23T06:00:01+09:00", "2026-11-24T07:00:00+09:00"),
            ("2026-12-31T23:30:00+09:00", "2027-01-01T07:00:00+09:00"),
            ("2028-02-28T08:00:00+09:00", "2028-02-29T07:00:00+09:00"),
        ] {
            let got = next_morning_in_tokyo(at(now));
            assert_eq!(got.to_rfc3339(), expected, "{now}");
        }
    }

    /// What POST /calls itself checks: the generated time is accepted relative to its "now",
    /// today and a year from today (and at the hours around a day's change in Japan).
    #[test]
    fn the_generated_create_call_is_valid_on_any_date() {
        let today = Utc::now();
        for now in [
            today,
            today + Duration::days(365),
            at("2027-06-30T21:59:00Z"),
            at("2027-06-30T22:00:01Z"),
        ] {
            let event = create_call(now);
            let body: Value = serde_json::from_str(event["body"].as_str().unwrap()).unwrap();
            let raw = body["scheduledAt"].as_str().unwrap();
            koe::domain::reservation::ScheduledAt::parse("scheduledAt", raw, now)
                .unwrap_or_else(|e| panic!("{raw} at {now}: {e:?}"));
            assert_eq!(
                event["headers"]["content-length"],
                event["body"].as_str().unwrap().len().to_string()
            );
            assert_eq!(body["deviceId"], "6F9619FF-8B86-D011-B42D-00C04FC964FF");
        }
    }

    #[test]
    fn round_2_answers_round_1s_steps_by_their_ids() {
        let round1 = serde_json::json!({"statusCode": 200, "body": serde_json::json!({
            "type": "plan",
            "steps": [
                {"id": "a.b.c", "tool": "calendar", "args": {}},
                {"id": "d.e.f", "tool": "calendar", "args": {}},
            ]}).to_string()});
        let event = agent_round2(&round1).unwrap();
        let body: Value = serde_json::from_str(event["body"].as_str().unwrap()).unwrap();
        let ids = crate::harness::strings_of(&body["results"], "stepId");
        assert_eq!(ids, ["a.b.c", "d.e.f"]);
        assert_eq!(body["results"][1]["output"]["events"][0]["title"], "歯医者");
        // Round 2 is answered only for the device its plan was issued for: the committed
        // round 2 names the device the committed round 1 does.
        let round1_body: Value =
            serde_json::from_str(committed("agent")["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["deviceId"], round1_body["deviceId"]);
        assert!(body["deviceId"].is_string(), "{body}");
        assert_eq!(
            event["headers"]["content-length"],
            event["body"].as_str().unwrap().len().to_string()
        );
        let direct = serde_json::json!({"type": "answer", "reply": "はい", "emotion": "happy"});
        assert!(agent_round2(&direct).unwrap_err().contains("no round 2"));
    }
}
