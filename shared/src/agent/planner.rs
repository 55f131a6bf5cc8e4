//! The planner (round 1): one structured completion that either plans tool steps for the device
//! (only tools the client listed, at most 5) or answers at once.

use chrono::{DateTime, FixedOffset, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Invalid, check_answer, complete_checked, emotion_schema, json_schema_format, prompts};
use crate::domain::agent::{AgentReply, Capability, MAX_STEPS, PlanStep, Round1};
use crate::domain::chat::{ChatMessage, Role};
use crate::model::{ModelProvider, ModelRequest, ProviderError};
use crate::platform::config::AgentConfig;

/// Room for a 5-step plan or a short spoken answer.
const MAX_TOKENS: u32 = 600;

/// The response schema: `{"decision": plan | answer}` (strict mode wants an object at the root,
/// so the union sits one level down). Tools are limited to `capabilities`; with none, only the
/// answer exists. Limits beyond types and enums (1 to 5 steps, RFC 3339, `from < to`) are in
/// descriptions and checked here: strict mode does not take them on every model.
pub fn schema(capabilities: &[Capability]) -> Value {
    let answer = json!({
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": ["answer"]},
            "reply": {"type": "string", "description": "What the character says, as spoken words."},
            "emotion": emotion_schema(),
        },
        "required": ["type", "reply", "emotion"],
        "additionalProperties": false,
    });
    let mut branches = vec![answer];
    if !capabilities.is_empty() {
        let range = |what: &str| {
            json!({"type": "string", "description": format!(
                "{what}: an RFC 3339 date-time with the user's UTC offset")})
        };
        branches.insert(
            0,
            json!({
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["plan"]},
                    "steps": {
                        "type": "array",
                        "description": format!("1 to {MAX_STEPS} steps for the device to run"),
                        "items": {
                            "type": "object",
                            "properties": {
                                "tool": {
                                    "type": "string",
                                    "enum": capabilities.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
                                },
                                "args": {
                                    "type": "object",
                                    "properties": {
                                        "from": range("Start of the range, inclusive"),
                                        "to": range("End of the range, exclusive, after from"),
                                    },
                                    "required": ["from", "to"],
                                    "additionalProperties": false,
                                },
                            },
                            "required": ["tool", "args"],
                            "additionalProperties": false,
                        },
                    },
                },
                "required": ["type", "steps"],
                "additionalProperties": false,
            }),
        );
    }
    json!({
        "type": "object",
        "properties": {"decision": {"anyOf": branches}},
        "required": ["decision"],
        "additionalProperties": false,
    })
}

#[derive(Deserialize)]
struct Output {
    decision: Decision,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Decision {
    Plan { steps: Vec<RawStep> },
    Answer { reply: String, emotion: String },
}

#[derive(Deserialize)]
struct RawStep {
    tool: String,
    args: RawRange,
}

#[derive(Deserialize)]
struct RawRange {
    from: String,
    to: String,
}

fn check_step(i: usize, step: RawStep, capabilities: &[Capability]) -> Result<PlanStep, Invalid> {
    let tool = Capability::from_name(&step.tool)
        .filter(|c| capabilities.contains(c))
        .ok_or_else(|| Invalid::new(format!("steps[{i}].tool is not a listed capability")))?;
    let time = |field: &str, raw: &str| {
        DateTime::<FixedOffset>::parse_from_rfc3339(raw)
            .map_err(|_| Invalid::new(format!("steps[{i}].args.{field} is not RFC 3339")))
    };
    let from = time("from", &step.args.from)?;
    let to = time("to", &step.args.to)?;
    if from >= to {
        return Err(Invalid::new(format!(
            "steps[{i}].args.from is not before to"
        )));
    }
    Ok(PlanStep {
        id: format!("s{}", i + 1),
        tool,
        from,
        to,
    })
}

/// Checks one planner output against the schema and the rules the schema cannot carry. Step ids
/// are assigned here (`s1`, `s2`, ...), so the model cannot get them wrong.
pub fn check_output(content: &str, capabilities: &[Capability]) -> Result<AgentReply, Invalid> {
    let output: Output = serde_json::from_str(content)
        .map_err(|_| Invalid::new("output does not match the planner schema"))?;
    match output.decision {
        Decision::Answer { reply, emotion } => check_answer(&reply, &emotion),
        Decision::Plan { steps } => {
            if steps.is_empty() || steps.len() > MAX_STEPS {
                return Err(Invalid::new(format!(
                    "plan has {} steps, not 1 to {MAX_STEPS}",
                    steps.len()
                )));
            }
            let steps = steps
                .into_iter()
                .enumerate()
                .map(|(i, step)| check_step(i, step, capabilities))
                .collect::<Result<_, _>>()?;
            Ok(AgentReply::Plan(steps))
        }
    }
}

pub fn request(settings: &AgentConfig, round: &Round1, now: DateTime<Utc>) -> ModelRequest {
    ModelRequest {
        model: settings.planner_model.clone(),
        messages: vec![
            ChatMessage {
                role: Role::System,
                content: prompts::planner_system(
                    &settings.persona,
                    now,
                    round.timezone,
                    &round.capabilities,
                ),
            },
            ChatMessage {
                role: Role::User,
                content: round.message.clone(),
            },
        ],
        max_tokens: MAX_TOKENS,
        response_format: Some(json_schema_format(
            "agent_plan",
            schema(&round.capabilities),
        )),
    }
}

/// Round 1's one planner call: a checked plan or answer.
pub async fn plan(
    provider: &dyn ModelProvider,
    settings: &AgentConfig,
    round: &Round1,
    now: DateTime<Utc>,
) -> Result<AgentReply, ProviderError> {
    complete_checked(
        provider,
        "planner",
        request(settings, round, now),
        |content| check_output(content, &round.capabilities),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::agent::Emotion;

    use crate::domain::agent::tools::calendar::CALENDAR;

    const CAL: &[Capability] = &[Capability::of(&CALENDAR)];

    fn plan_of(steps: Value) -> String {
        json!({"decision": {"type": "plan", "steps": steps}}).to_string()
    }

    fn step(from: &str, to: &str) -> Value {
        json!({"tool": "calendar", "args": {"from": from, "to": to}})
    }

    fn reason(content: &str, capabilities: &[Capability]) -> String {
        check_output(content, capabilities).unwrap_err().0
    }

    #[test]
    fn a_valid_plan_gets_step_ids_in_order() {
        let AgentReply::Plan(steps) = check_output(
            &plan_of(json!([
                step("2026-03-02T00:00:00+09:00", "2026-03-03T00:00:00+09:00"),
                step("2026-03-07T00:00:00+09:00", "2026-03-09T00:00:00+09:00"),
            ])),
            CAL,
        )
        .unwrap() else {
            panic!("plan")
        };
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].id, "s1");
        assert_eq!(steps[1].id, "s2");
        assert_eq!(steps[1].from.to_rfc3339(), "2026-03-07T00:00:00+09:00");
    }

    #[test]
    fn plans_break_the_rules_in_every_way_the_schema_cannot_stop() {
        let ok = step("2026-03-02T00:00:00+09:00", "2026-03-03T00:00:00+09:00");
        let cases = [
            (plan_of(json!([])), "plan has 0 steps, not 1 to 5"),
            (
                plan_of(json!(vec![ok.clone(); 6])),
                "plan has 6 steps, not 1 to 5",
            ),
            (
                plan_of(json!([
                    ok.clone(),
                    step("2026-03-03T00:00:00+09:00", "2026-03-03T00:00:00+09:00")
                ])),
                "steps[1].args.from is not before to",
            ),
            (
                plan_of(json!([step(
                    "2026-03-04T00:00:00+09:00",
                    "2026-03-03T00:00:00+09:00"
                )])),
                "steps[0].args.from is not before to",
            ),
            (
                plan_of(json!([step("tomorrow", "2026-03-03T00:00:00+09:00")])),
                "steps[0].args.from is not RFC 3339",
            ),
            (
                plan_of(json!([step(
                    "2026-03-02T00:00:00+09:00",
                    "2026-03-03T00:00:00"
                )])),
                "steps[0].args.to is not RFC 3339",
            ),
            (
                plan_of(
                    json!([{"tool": "mail", "args": {"from": "2026-03-02T00:00:00Z", "to": "2026-03-03T00:00:00Z"}}]),
                ),
                "steps[0].tool is not a listed capability",
            ),
            (
                "not json".to_owned(),
                "output does not match the planner schema",
            ),
            (
                json!({"type": "answer", "reply": "x", "emotion": "happy"}).to_string(),
                "output does not match the planner schema",
            ),
        ];
        for (content, expected) in cases {
            assert_eq!(reason(&content, CAL), expected, "{content}");
        }
        // A tool the client did not list is refused even if the server knows it.
        assert_eq!(
            reason(&plan_of(json!([ok])), &[]),
            "steps[0].tool is not a listed capability"
        );
    }

    #[test]
    fn answers_need_text_and_a_known_emotion() {
        let answer = |reply: &str, emotion: &str| {
            json!({"decision": {"type": "answer", "reply": reply, "emotion": emotion}}).to_string()
        };
        assert_eq!(
            check_output(&answer(" やあ！ ", "shy"), &[]).unwrap(),
            AgentReply::Answer {
                reply: "やあ！".into(),
                emotion: Emotion::Shy
            }
        );
        assert_eq!(reason(&answer("  ", "happy"), CAL), "reply is empty");
        assert_eq!(
            reason(&answer("x", "excited"), CAL),
            "emotion is not in the set"
        );
    }

    #[test]
    fn the_schema_names_only_listed_tools_and_is_strict_everywhere() {
        let with = schema(CAL);
        let branches = with["properties"]["decision"]["anyOf"].as_array().unwrap();
        assert_eq!(branches.len(), 2);
        assert_eq!(
            branches[0]["properties"]["steps"]["items"]["properties"]["tool"]["enum"],
            json!(["calendar"])
        );
        let without = schema(&[]);
        let branches = without["properties"]["decision"]["anyOf"]
            .as_array()
            .unwrap();
        assert_eq!(branches.len(), 1);
        assert_eq!(branches[0]["properties"]["type"]["enum"], json!(["answer"]));

        // Strict mode: every object lists all its properties as required and allows no others.
        fn check(v: &Value) {
            match v {
                Value::Object(map) => {
                    if map.get("type") == Some(&json!("object")) {
                        let mut props: Vec<&String> =
                            map["properties"].as_object().unwrap().keys().collect();
                        let mut required: Vec<&str> = map["required"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|r| r.as_str().unwrap())
                            .collect();
                        props.sort();
                        required.sort();
                        assert_eq!(props, required);
                        assert_eq!(map["additionalProperties"], json!(false));
                    }
                    map.values().for_each(check);
                }
                Value::Array(items) => items.iter().for_each(check),
                _ => {}
            }
        }
        check(&with);
        check(&without);
    }
}
