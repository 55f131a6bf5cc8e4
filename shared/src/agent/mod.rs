//! Agent mode's model side: the planner (round 1), the responder (round 2), their prompts, and
//! the daily limit. Each round is one schema-constrained completion, checked here before a
//! client sees it.

use crate::domain::agent::{AgentReply, Emotion};
use crate::model::{ModelProvider, ModelRequest, ProviderError};

pub mod api;
pub mod binding;
pub mod daily_limit;
pub mod handler;
pub mod planner;
pub mod prompts;
pub mod responder;

/// Why a model output was refused. Names the rule broken, never the output itself (which may
/// repeat the user's message or calendar).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid(pub String);

impl Invalid {
    fn new(reason: impl Into<String>) -> Invalid {
        Invalid(reason.into())
    }
}

/// The emotion property of both schemas.
fn emotion_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "string",
        "enum": Emotion::ALL.map(Emotion::as_str),
        "description": "How the character feels saying the reply.",
    })
}

/// A reply and emotion as the contract wants them: non-blank text, a known emotion.
fn check_answer(reply: &str, emotion: &str) -> Result<AgentReply, Invalid> {
    let reply = reply.trim();
    if reply.is_empty() {
        return Err(Invalid::new("reply is empty"));
    }
    let emotion =
        Emotion::from_name(emotion).ok_or_else(|| Invalid::new("emotion is not in the set"))?;
    Ok(AgentReply::Answer {
        reply: reply.to_owned(),
        emotion,
    })
}

/// An OpenAI `response_format` for strict structured output against `schema`.
fn json_schema_format(name: &str, schema: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "type": "json_schema",
        "json_schema": {"name": name, "strict": true, "schema": schema},
    })
}

/// One completion whose content `check` accepts. An output that fails `check` (or a completion
/// without usable content) is asked for once more; a second failure is `BadResponse`
/// (500 PROVIDER_BAD_RESPONSE). Other provider failures end the call at once.
async fn complete_checked<T>(
    provider: &dyn ModelProvider,
    call: &'static str,
    request: ModelRequest,
    check: impl Fn(&str) -> Result<T, Invalid>,
) -> Result<T, ProviderError> {
    for attempt in 1..=2 {
        let reason = match provider.complete(request.clone()).await {
            Ok(reply) => match check(&reply.content) {
                Ok(value) => return Ok(value),
                Err(Invalid(reason)) => reason,
            },
            Err(ProviderError::BadResponse(reason)) => reason,
            Err(e) => return Err(e),
        };
        tracing::warn!(call, attempt, %reason, "model output refused");
    }
    Err(ProviderError::BadResponse(format!(
        "{call} output invalid twice"
    )))
}
