//! The responder (round 2): one structured completion that turns the device's tool results into
//! the character's spoken reply and an emotion.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Invalid, check_answer, complete_checked, emotion_schema, json_schema_format, prompts};
use crate::domain::agent::{AgentReply, Round2};
use crate::domain::chat::{ChatMessage, Role};
use crate::model::{ModelProvider, ModelRequest, ProviderError};
use crate::platform::config::AgentConfig;

/// Room for a short spoken answer.
const MAX_TOKENS: u32 = 500;

pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "reply": {"type": "string", "description": "What the character says, as spoken words."},
            "emotion": emotion_schema(),
        },
        "required": ["reply", "emotion"],
        "additionalProperties": false,
    })
}

#[derive(Deserialize)]
struct Output {
    reply: String,
    emotion: String,
}

pub fn check_output(content: &str) -> Result<AgentReply, Invalid> {
    let output: Output = serde_json::from_str(content)
        .map_err(|_| Invalid::new("output does not match the responder schema"))?;
    check_answer(&output.reply, &output.emotion)
}

pub fn request(settings: &AgentConfig, round: &Round2, now: DateTime<Utc>) -> ModelRequest {
    ModelRequest {
        model: settings.responder_model.clone(),
        messages: vec![
            ChatMessage {
                role: Role::System,
                content: prompts::responder_system(
                    &settings.persona,
                    now,
                    round.timezone,
                    &round.results,
                ),
            },
            ChatMessage {
                role: Role::User,
                content: round.message.clone(),
            },
            ChatMessage {
                role: Role::User,
                content: prompts::results_message(&round.results),
            },
        ],
        max_tokens: MAX_TOKENS,
        response_format: Some(json_schema_format("agent_answer", schema())),
    }
}

/// Round 2's one responder call: a checked answer.
pub async fn respond(
    provider: &dyn ModelProvider,
    settings: &AgentConfig,
    round: &Round2,
    now: DateTime<Utc>,
) -> Result<AgentReply, ProviderError> {
    complete_checked(
        provider,
        "responder",
        request(settings, round, now),
        check_output,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::agent::Emotion;

    #[test]
    fn answers_are_checked() {
        assert_eq!(
            check_output(r#"{"reply":"楽しみだね","emotion":"happy"}"#).unwrap(),
            AgentReply::Answer {
                reply: "楽しみだね".into(),
                emotion: Emotion::Happy
            }
        );
        for (content, reason) in [
            (r#"{"reply":"","emotion":"happy"}"#, "reply is empty"),
            (
                r#"{"reply":"x","emotion":"bored"}"#,
                "emotion is not in the set",
            ),
            (
                r#"{"reply":"x"}"#,
                "output does not match the responder schema",
            ),
            ("楽しみだね", "output does not match the responder schema"),
        ] {
            assert_eq!(check_output(content).unwrap_err().0, reason, "{content}");
        }
    }
}
