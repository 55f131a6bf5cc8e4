//! The body cap against the field caps: the largest round 2 fits, one byte more does not.

use koe::agent::api::AGENT_BODY_LIMIT;
use koe::domain::agent::{
    MAX_DATETIME_CHARS, MAX_EVENTS, MAX_MESSAGE_CHARS, MAX_STEP_ID_CHARS, MAX_STEPS,
    MAX_TIMEZONE_CHARS, MAX_TITLE_CHARS,
};
use koe::domain::device::MAX_DEVICE_ID_CHARS;
use koe_testkit::harness::{error_body, issued_step_ids_with};
use serde_json::json;

use crate::api_chat::{assert_fits_within, padded_to};

use super::{app, now, ok_body, post, responder_answer, round_2};

/// The largest round 2 the field caps allow, written the most expensive way the cap counts:
/// every string character a 6-byte `\\u00XX` escape, 5 results of 200 events with the longest
/// date-times, the longest device id and time zone, compact.
fn largest_round_2() -> String {
    let esc = |n: usize| "\\u0041".repeat(n);
    let escaped = |s: &str| {
        s.chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect::<String>()
    };
    let raw_at = "2026-03-02T10:00:00.123456789+09:00";
    assert_eq!(raw_at.len(), MAX_DATETIME_CHARS);
    let at = escaped(raw_at);
    let event = format!(
        r#"{{"title":"{}","start":"{at}","end":"{at}","allDay":false}}"#,
        esc(MAX_TITLE_CHARS)
    );
    let events = vec![event; MAX_EVENTS].join(",");
    // Issued step ids are exactly MAX_STEP_ID_CHARS long.
    let device = "d".repeat(MAX_DEVICE_ID_CHARS);
    let results = issued_step_ids_with("koe", &device, MAX_STEPS, now())
        .iter()
        .map(|id| {
            assert_eq!(id.len(), MAX_STEP_ID_CHARS);
            format!(
                r#"{{"stepId":"{}","tool":"calendar","output":{{"events":[{events}]}}}}"#,
                escaped(id)
            )
        })
        .collect::<Vec<_>>()
        .join(",");
    let raw_zone = "America/Argentina/ComodRivadavia";
    assert_eq!(raw_zone.len(), MAX_TIMEZONE_CHARS);
    let zone = escaped(raw_zone);
    format!(
        r#"{{"message":"{}","results":[{results}],"deviceId":"{}","timezone":"{zone}"}}"#,
        esc(MAX_MESSAGE_CHARS),
        escaped(&device)
    )
}

#[tokio::test]
async fn the_largest_round_2_the_field_caps_allow_fits_the_cap_and_one_byte_more_does_not() {
    let app = app().await;
    let largest = largest_round_2();
    // The slack (1024) and a comma after every event and result: 5 + 1 more than JSON has.
    assert_fits_within(&largest, AGENT_BODY_LIMIT, 1024 + 6);
    app.openai.script([
        responder_answer("はい", "neutral"),
        responder_answer("はい", "neutral"),
    ]);
    ok_body(post(&app, largest.clone()).await).await;
    ok_body(post(&app, padded_to(&largest, AGENT_BODY_LIMIT)).await).await;
    let body = error_body(
        post(&app, padded_to(&largest, AGENT_BODY_LIMIT + 1)).await,
        400,
        "INVALID_REQUEST",
    )
    .await;
    assert_eq!(
        body["message"],
        format!("body must be at most {AGENT_BODY_LIMIT} bytes")
    );
    assert_eq!(app.openai.request_count(), 2);
}

#[tokio::test]
async fn a_date_time_longer_than_35_characters_is_400() {
    let app = app().await;
    let mut body = round_2();
    body["results"][0]["output"]["events"][0]["start"] =
        json!("2026-03-02T10:00:00.1234567890+09:00");
    let body = error_body(post(&app, body.to_string()).await, 400, "INVALID_REQUEST").await;
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("results[0].output.events[0].start must be an RFC 3339 date-time"),
        "{body}"
    );
}
