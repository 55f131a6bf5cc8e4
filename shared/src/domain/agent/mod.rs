//! Agent mode: the two rounds of POST /agent, parsed once at the edge, and what a round answers.
//!
//! A body with `results` is round 2 (the client ran the plan and sends what its tools read);
//! any other body is round 1 (a new message, with the tools the device can run).

use chrono::{DateTime, FixedOffset, SecondsFormat};
use chrono_tz::Tz;
use serde::Serialize;

use super::device::DeviceId;

pub const MAX_MESSAGE_CHARS: usize = 4000;
/// Most steps in a plan, and so most results in a round 2.
pub const MAX_STEPS: usize = 5;
pub const MAX_STEP_ID_CHARS: usize = 64;
/// Longest RFC 3339 date-time accepted: `2026-03-02T10:00:00.123456789+09:00` (nanoseconds and
/// an offset). A cap, so that the body cap derived from these caps covers every valid body.
pub const MAX_DATETIME_CHARS: usize = 35;
/// Longest IANA time zone name (`America/Argentina/ComodRivadavia` is 32).
pub const MAX_TIMEZONE_CHARS: usize = 32;
/// The user's time zone when the request names none.
pub const DEFAULT_TIMEZONE: Tz = chrono_tz::Asia::Tokyo;

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

/// One step of a plan: a tool the client listed, over a time range (`from` before `to`, its
/// [`tools::Args::Range`]).
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

mod parse;
#[cfg(test)]
mod tests;
pub mod tools;

pub use self::parse::parse_rfc3339;
pub use self::tools::calendar::{MAX_EVENTS, MAX_TITLE_CHARS};
pub use self::tools::{Capability, ToolOutput};
