//! Agent mode: the two rounds of POST /agent, parsed once at the edge, and what a round answers.
//!
//! A body with `results` is round 2 (the client ran the plan and sends what its tools read);
//! any other body is round 1 (a new message, with the tools the device can run).

use chrono::{DateTime, FixedOffset, SecondsFormat};
use chrono_tz::Tz;
use serde::Serialize;

use super::device::DeviceId;
use super::fields::Fields;
use serde_json::{Map, Value};

use super::Invalid;

pub const MAX_MESSAGE_CHARS: usize = 4000;
/// Most steps in a plan, and so most results in a round 2.
pub const MAX_STEPS: usize = 5;
/// Most calendar events in one result.
pub const MAX_EVENTS: usize = 200;
pub const MAX_TITLE_CHARS: usize = 200;
pub const MAX_STEP_ID_CHARS: usize = 64;
/// Longest RFC 3339 date-time accepted: `2026-03-02T10:00:00.123456789+09:00` (nanoseconds and
/// an offset). A cap, so that the body cap derived from these caps covers every valid body.
pub const MAX_DATETIME_CHARS: usize = 35;
/// Longest IANA time zone name (`America/Argentina/ComodRivadavia` is 32).
pub const MAX_TIMEZONE_CHARS: usize = 32;
/// The user's time zone when the request names none.
pub const DEFAULT_TIMEZONE: Tz = chrono_tz::Asia::Tokyo;

/// A tool the device can run for the planner. Unknown names in `capabilities` are ignored, so
/// an older server keeps working with a newer app.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Capability {
    /// Reads the events of the device's calendar in a time range.
    Calendar,
}

impl Capability {
    pub const ALL: [Capability; 1] = [Capability::Calendar];

    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Calendar => "calendar",
        }
    }

    pub fn from_name(name: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.as_str() == name)
    }

    fn names() -> String {
        Capability::ALL.map(Capability::as_str).join(", ")
    }
}

/// How the character feels saying the reply; the app shows it (face, voice tone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Emotion {
    Neutral,
    Happy,
    Sad,
    Angry,
    Surprised,
    Shy,
}

impl Emotion {
    pub const ALL: [Emotion; 6] = [
        Emotion::Neutral,
        Emotion::Happy,
        Emotion::Sad,
        Emotion::Angry,
        Emotion::Surprised,
        Emotion::Shy,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Emotion::Neutral => "neutral",
            Emotion::Happy => "happy",
            Emotion::Sad => "sad",
            Emotion::Angry => "angry",
            Emotion::Surprised => "surprised",
            Emotion::Shy => "shy",
        }
    }

    pub fn from_name(name: &str) -> Option<Emotion> {
        Emotion::ALL.into_iter().find(|e| e.as_str() == name)
    }
}

/// Round 1: a message, the tools the device can run, and the device (whose daily use counts).
#[derive(Debug, Clone, PartialEq)]
pub struct Round1 {
    pub message: String,
    /// The known capabilities the client listed, each once, in its order.
    pub capabilities: Vec<Capability>,
    pub device_id: DeviceId,
    pub timezone: Tz,
}

/// Round 2: the message again, and what the device's tools read for the plan's steps.
#[derive(Debug, Clone, PartialEq)]
pub struct Round2 {
    pub message: String,
    pub results: Vec<StepResult>,
    /// The device the plan was issued for: its step ids are answered only for it (round 2 is
    /// never counted).
    pub device_id: DeviceId,
    pub timezone: Tz,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AgentRequest {
    Round1(Round1),
    Round2(Round2),
}

/// What one plan step's tool read on the device.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepResult {
    pub step_id: String,
    #[serde(flatten)]
    pub output: ToolOutput,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "tool", rename_all = "lowercase")]
pub enum ToolOutput {
    Calendar { events: Vec<CalendarEvent> },
}

/// One calendar event as the device read it: title and times only.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CalendarEvent {
    pub title: String,
    #[serde(serialize_with = "rfc3339")]
    pub start: DateTime<FixedOffset>,
    #[serde(serialize_with = "rfc3339")]
    pub end: DateTime<FixedOffset>,
    pub all_day: bool,
}

fn rfc3339<S: serde::Serializer>(t: &DateTime<FixedOffset>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
}

/// An RFC 3339 date-time with an offset, as the value of the field named `field`.
pub fn parse_rfc3339(field: &str, raw: &str) -> Result<DateTime<FixedOffset>, Invalid> {
    let parsed = if raw.len() > MAX_DATETIME_CHARS {
        None
    } else {
        DateTime::parse_from_rfc3339(raw).ok()
    };
    parsed.ok_or_else(|| {
        Invalid::new(
            field,
            "must be an RFC 3339 date-time with an offset, e.g. 2026-01-02T10:00:00+09:00",
        )
    })
}

fn parse_timezone(fields: &Fields<'_>) -> Result<Tz, Invalid> {
    match fields.optional_str("timezone")? {
        None => Ok(DEFAULT_TIMEZONE),
        Some(name) => name.parse::<Tz>().map_err(|_| {
            Invalid::new(
                "timezone",
                "must be an IANA time zone name, e.g. Asia/Tokyo",
            )
        }),
    }
}

fn parse_capabilities(fields: &Fields<'_>) -> Result<Vec<Capability>, Invalid> {
    let mut capabilities = Vec::new();
    for (i, item) in fields.required_array("capabilities")?.iter().enumerate() {
        let name = item
            .as_str()
            .ok_or_else(|| Invalid::new(format!("capabilities[{i}]"), "must be a string"))?;
        if let Some(capability) = Capability::from_name(name)
            && !capabilities.contains(&capability)
        {
            capabilities.push(capability);
        }
    }
    Ok(capabilities)
}

fn parse_event(event: &Fields<'_>) -> Result<CalendarEvent, Invalid> {
    let title = event.required_text("title", 0, MAX_TITLE_CHARS)?.to_owned();
    let start = parse_rfc3339(&event.name("start"), event.required_str("start")?)?;
    let end = parse_rfc3339(&event.name("end"), event.required_str("end")?)?;
    let all_day = event.optional_bool("allDay")?.unwrap_or(false);
    Ok(CalendarEvent {
        title,
        start,
        end,
        all_day,
    })
}

fn parse_result(result: &Fields<'_>) -> Result<StepResult, Invalid> {
    let step_id = result
        .required_text("stepId", 1, MAX_STEP_ID_CHARS)?
        .to_owned();
    let tool = result.required_str("tool")?;
    let tool = Capability::from_name(tool).ok_or_else(|| {
        Invalid::new(
            result.name("tool"),
            format!("must be one of {}", Capability::names()),
        )
    })?;
    let output = Fields::nested(result.required("output")?, result.name("output"))?;
    let output = match tool {
        Capability::Calendar => {
            let items = output.required_array("events")?;
            if items.len() > MAX_EVENTS {
                return Err(Invalid::new(
                    output.name("events"),
                    format!("must have at most {MAX_EVENTS} items"),
                ));
            }
            let events = items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    parse_event(&Fields::nested(
                        item,
                        format!("{}[{i}]", output.name("events")),
                    )?)
                })
                .collect::<Result<_, _>>()?;
            ToolOutput::Calendar { events }
        }
    };
    Ok(StepResult { step_id, output })
}

impl AgentRequest {
    pub fn parse(body: &Map<String, Value>) -> Result<AgentRequest, Invalid> {
        let fields = Fields::root(body);
        let message = fields
            .required_text("message", 1, MAX_MESSAGE_CHARS)?
            .to_owned();

        let Some(items) = fields.optional_array("results")? else {
            let capabilities = parse_capabilities(&fields)?;
            let device_id = DeviceId::parse("deviceId", fields.required_str("deviceId")?)?;
            let timezone = parse_timezone(&fields)?;
            return Ok(AgentRequest::Round1(Round1 {
                message,
                capabilities,
                device_id,
                timezone,
            }));
        };

        if items.len() > MAX_STEPS {
            return Err(Invalid::new(
                "results",
                format!("must have at most {MAX_STEPS} items (one per plan step)"),
            ));
        }
        let results = items
            .iter()
            .enumerate()
            .map(|(i, item)| parse_result(&Fields::nested(item, format!("results[{i}]"))?))
            .collect::<Result<_, _>>()?;
        let device_id = DeviceId::parse("deviceId", fields.required_str("deviceId")?)?;
        let timezone = parse_timezone(&fields)?;
        Ok(AgentRequest::Round2(Round2 {
            message,
            results,
            device_id,
            timezone,
        }))
    }
}

/// One step of a plan: a tool the client listed, over a time range (`from` before `to`).
#[derive(Debug, Clone, PartialEq)]
pub struct PlanStep {
    /// `s1`, `s2`, ... in plan order; round 2's `stepId` refers to it.
    pub id: String,
    pub tool: Capability,
    pub from: DateTime<FixedOffset>,
    pub to: DateTime<FixedOffset>,
}

/// What a round answers: a plan for the device to run (round 1 only), or the final answer.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentReply {
    Plan(Vec<PlanStep>),
    Answer { reply: String, emotion: Emotion },
}

/// The JSON of an [`AgentReply`].
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum AgentReplyView<'a> {
    Plan { steps: Vec<PlanStepView> },
    Answer { reply: &'a str, emotion: Emotion },
}

#[derive(Serialize)]
pub struct PlanStepView {
    id: String,
    tool: Capability,
    args: RangeView,
}

#[derive(Serialize)]
struct RangeView {
    from: String,
    to: String,
}

impl<'a> From<&'a AgentReply> for AgentReplyView<'a> {
    fn from(reply: &'a AgentReply) -> AgentReplyView<'a> {
        let show = |t: &DateTime<FixedOffset>| t.to_rfc3339_opts(SecondsFormat::AutoSi, true);
        match reply {
            AgentReply::Plan(steps) => AgentReplyView::Plan {
                steps: steps
                    .iter()
                    .map(|s| PlanStepView {
                        id: s.id.clone(),
                        tool: s.tool,
                        args: RangeView {
                            from: show(&s.from),
                            to: show(&s.to),
                        },
                    })
                    .collect(),
            },
            AgentReply::Answer { reply, emotion } => AgentReplyView::Answer {
                reply,
                emotion: *emotion,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: serde_json::Value) -> Result<AgentRequest, String> {
        AgentRequest::parse(body.as_object().unwrap()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_body_without_results_is_round_1_with_known_capabilities_once() {
        let AgentRequest::Round1(r) = parse(json!({
            "message": "明日の予定は？",
            "capabilities": ["camera", "calendar", "calendar"],
            "deviceId": "d1",
            "results": null,
        }))
        .unwrap() else {
            panic!("round 1")
        };
        assert_eq!(r.capabilities, vec![Capability::Calendar]);
        assert_eq!(r.timezone, chrono_tz::Asia::Tokyo);
        assert_eq!(r.device_id.as_str(), "d1");
    }

    #[test]
    fn a_body_with_results_is_round_2_and_names_its_device() {
        let AgentRequest::Round2(r) = parse(json!({
            "message": "明日の予定は？",
            "deviceId": "d2",
            "timezone": "Europe/Berlin",
            "results": [{"stepId": "s1", "tool": "calendar", "output": {"events": [
                {"title": "", "start": "2026-03-02T10:00:00+09:00", "end": "2026-03-02T11:00:00+09:00"},
                {"title": "休み", "start": "2026-03-03T00:00:00+09:00", "end": "2026-03-04T00:00:00+09:00", "allDay": true},
            ]}}],
        }))
        .unwrap() else {
            panic!("round 2")
        };
        assert_eq!(r.device_id.as_str(), "d2");
        assert_eq!(r.timezone, chrono_tz::Europe::Berlin);
        let ToolOutput::Calendar { events } = &r.results[0].output;
        assert!(!events[0].all_day && events[1].all_day);
        assert_eq!(
            serde_json::to_value(&r.results[0]).unwrap()["events"][1]["start"],
            "2026-03-03T00:00:00+09:00"
        );
    }

    #[test]
    fn each_rule_names_its_field() {
        let event = |title: &str, start: &str| {
            json!({"message": "m", "results": [{"stepId": "s1", "tool": "calendar",
                "output": {"events": [{"title": title, "start": start, "end": "2026-03-02T11:00:00Z"}]}}]})
        };
        let cases = [
            (
                json!({"capabilities": [], "deviceId": "d"}),
                "message is required",
            ),
            (
                json!({"message": "", "capabilities": [], "deviceId": "d"}),
                "message must be 1 to 4000 characters",
            ),
            (
                json!({"message": "m", "capabilities": "calendar", "deviceId": "d"}),
                "capabilities must be an array",
            ),
            (
                json!({"message": "m", "capabilities": ["calendar", 1], "deviceId": "d"}),
                "capabilities[1] must be a string",
            ),
            (
                json!({"message": "m", "capabilities": []}),
                "deviceId is required",
            ),
            (
                json!({"message": "m", "capabilities": [], "deviceId": "d", "timezone": "JST+9"}),
                "timezone must be an IANA time zone name, e.g. Asia/Tokyo",
            ),
            (
                json!({"message": "m", "results": {}}),
                "results must be an array",
            ),
            (
                json!({"message": "m", "results": [{"tool": "calendar", "output": {"events": []}}]}),
                "results[0].stepId is required",
            ),
            (
                json!({"message": "m", "results": [{"stepId": "s1", "tool": "mail", "output": {}}]}),
                "results[0].tool must be one of calendar",
            ),
            (
                json!({"message": "m", "results": [{"stepId": "s1", "tool": "calendar"}]}),
                "results[0].output is required",
            ),
            (
                json!({"message": "m", "results": [{"stepId": "s1", "tool": "calendar", "output": {}}]}),
                "results[0].output.events is required",
            ),
            (
                json!({"message": "m", "results": [{"stepId": "s1", "tool": "calendar", "output": {"events": []}}]}),
                "deviceId is required",
            ),
            (
                json!({"message": "m", "deviceId": null, "results": [{"stepId": "s1", "tool": "calendar", "output": {"events": []}}]}),
                "deviceId is required",
            ),
            (
                event(&"x".repeat(201), "2026-03-02T10:00:00Z"),
                "results[0].output.events[0].title must be 0 to 200 characters",
            ),
            (
                event("t", "2026-03-02 10:00"),
                "results[0].output.events[0].start must be an RFC 3339 date-time with an offset, e.g. 2026-01-02T10:00:00+09:00",
            ),
        ];
        for (body, expected) in cases {
            assert_eq!(parse(body.clone()).unwrap_err(), expected, "{body}");
        }
    }

    #[test]
    fn replies_serialize_as_the_contract_says() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap();
        let plan = AgentReply::Plan(vec![PlanStep {
            id: "s1".into(),
            tool: Capability::Calendar,
            from: at("2026-03-02T00:00:00+09:00"),
            to: at("2026-03-03T00:00:00+09:00"),
        }]);
        assert_eq!(
            serde_json::to_value(AgentReplyView::from(&plan)).unwrap(),
            json!({"type": "plan", "steps": [{"id": "s1", "tool": "calendar",
                "args": {"from": "2026-03-02T00:00:00+09:00", "to": "2026-03-03T00:00:00+09:00"}}]})
        );
        let answer = AgentReply::Answer {
            reply: "いいね".into(),
            emotion: Emotion::Happy,
        };
        assert_eq!(
            serde_json::to_value(AgentReplyView::from(&answer)).unwrap(),
            json!({"type": "answer", "reply": "いいね", "emotion": "happy"})
        );
    }

    #[test]
    fn names_round_trip() {
        for e in Emotion::ALL {
            assert_eq!(Emotion::from_name(e.as_str()), Some(e));
        }
        assert_eq!(Emotion::from_name("Happy"), None);
        assert_eq!(
            Capability::from_name("calendar"),
            Some(Capability::Calendar)
        );
    }
}
