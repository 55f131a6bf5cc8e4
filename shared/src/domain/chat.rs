//! `ChatRequest`: the body of POST /api/chat, parsed once at the edge.

use serde::{Deserialize, Serialize};

use super::fields::Fields;
use serde_json::{Map, Value};

use super::Invalid;

pub const MAX_MESSAGES: usize = 100;
pub const MAX_CONTENT_CHARS: usize = 16_000;
/// Most characters of `content` in all the messages together: 128 000, about the models'
/// context of 128k tokens (so 100 x 16 000 cannot all be sent at once). It keeps the body cap,
/// derived from these caps, well under Lambda's 6 MB request payload (see `routes`).
pub const MAX_TOTAL_CONTENT_CHARS: usize = 128_000;
pub const DEFAULT_MAX_TOKENS: u32 = 500;
pub const MAX_MAX_TOKENS: u32 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    fn parse(s: &str) -> Option<Role> {
        match s {
            "system" => Some(Role::System),
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

/// The chat models clients may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChatModel {
    #[default]
    Gpt4oMini,
    Gpt4o,
}

impl ChatModel {
    pub fn as_str(self) -> &'static str {
        match self {
            ChatModel::Gpt4oMini => "gpt-4o-mini",
            ChatModel::Gpt4o => "gpt-4o",
        }
    }

    fn parse(s: &str) -> Option<ChatModel> {
        match s {
            "gpt-4o-mini" => Some(ChatModel::Gpt4oMini),
            "gpt-4o" => Some(ChatModel::Gpt4o),
            _ => None,
        }
    }
}

/// A valid chat request: 1..=100 messages of 1..=16000 characters, a known model and
/// `max_tokens` in 1..=4096. Only `parse` makes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    pub model: ChatModel,
    pub max_tokens: u32,
}

impl ChatRequest {
    pub fn parse(body: &Map<String, Value>) -> Result<ChatRequest, Invalid> {
        let fields = Fields::root(body);

        let items = fields.required_array("messages")?;
        if items.is_empty() || items.len() > MAX_MESSAGES {
            return Err(Invalid::new(
                "messages",
                format!("must have 1 to {MAX_MESSAGES} items"),
            ));
        }
        let mut messages = Vec::with_capacity(items.len());
        let mut total_chars = 0;
        for (i, item) in items.iter().enumerate() {
            let message = Fields::nested(item, format!("messages[{i}]"))?;
            let role = message.required_str("role")?;
            let role = Role::parse(role).ok_or_else(|| {
                Invalid::new(
                    message.name("role"),
                    "must be one of system, user, assistant",
                )
            })?;
            let content = message.required_text("content", 1, MAX_CONTENT_CHARS)?;
            total_chars += content.chars().count();
            if total_chars > MAX_TOTAL_CONTENT_CHARS {
                return Err(Invalid::new(
                    "messages",
                    format!(
                        "must have at most {MAX_TOTAL_CONTENT_CHARS} characters of content in all"
                    ),
                ));
            }
            messages.push(ChatMessage {
                role,
                content: content.to_owned(),
            });
        }

        let model = match fields.optional_str("model")? {
            None => ChatModel::default(),
            Some(name) => ChatModel::parse(name)
                .ok_or_else(|| Invalid::new("model", "must be one of gpt-4o-mini, gpt-4o"))?,
        };

        let max_tokens = fields
            .optional_int("maxTokens", 1, i64::from(MAX_MAX_TOKENS))?
            .map_or(DEFAULT_MAX_TOKENS, |n| n as u32);

        Ok(ChatRequest {
            messages,
            model,
            max_tokens,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<ChatRequest, String> {
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        ChatRequest::parse(body.as_object().unwrap()).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_gpt_4o_mini_and_500_tokens() {
        let request = parse(r#"{"messages":[{"role":"user","content":"hi"}]}"#).unwrap();
        assert_eq!(request.model, ChatModel::Gpt4oMini);
        assert_eq!(request.max_tokens, 500);
        assert_eq!(request.messages[0].role, Role::User);
    }

    #[test]
    fn null_optional_fields_mean_absent_and_unknown_fields_are_ignored() {
        let request = parse(
            r#"{"messages":[{"role":"system","content":"x","name":"n"}],"model":null,"maxTokens":null,"stream":true}"#,
        )
        .unwrap();
        assert_eq!(request.model, ChatModel::Gpt4oMini);
        assert_eq!(request.max_tokens, 500);
    }

    #[test]
    fn each_rule_names_its_field() {
        let cases = [
            (r#"{}"#, "messages is required"),
            (r#"{"messages":"hi"}"#, "messages must be an array"),
            (r#"{"messages":[]}"#, "messages must have 1 to 100 items"),
            (r#"{"messages":[1]}"#, "messages[0] must be an object"),
            (
                r#"{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"bot","content":"c"}]}"#,
                "messages[2].role must be one of system, user, assistant",
            ),
            (
                r#"{"messages":[{"content":"a"}]}"#,
                "messages[0].role is required",
            ),
            (
                r#"{"messages":[{"role":"user","content":""}]}"#,
                "messages[0].content must be 1 to 16000 characters",
            ),
            (
                r#"{"messages":[{"role":"user","content":5}]}"#,
                "messages[0].content must be a string",
            ),
            (
                r#"{"messages":[{"role":"user","content":"a"}],"model":"gpt-5"}"#,
                "model must be one of gpt-4o-mini, gpt-4o",
            ),
            (
                r#"{"messages":[{"role":"user","content":"a"}],"maxTokens":0}"#,
                "maxTokens must be an integer from 1 to 4096",
            ),
            (
                r#"{"messages":[{"role":"user","content":"a"}],"maxTokens":2.5}"#,
                "maxTokens must be an integer from 1 to 4096",
            ),
        ];
        for (body, expected) in cases {
            assert_eq!(parse(body).unwrap_err(), expected, "body: {body}");
        }
    }

    #[test]
    fn limits_are_inclusive() {
        let content = "あ".repeat(MAX_CONTENT_CHARS);
        let body = serde_json::json!({
            "messages": vec![serde_json::json!({"role": "user", "content": content}); 1],
            "maxTokens": 4096,
            "model": "gpt-4o",
        });
        let request = ChatRequest::parse(body.as_object().unwrap()).unwrap();
        assert_eq!(request.max_tokens, 4096);
        assert_eq!(request.model, ChatModel::Gpt4o);

        let many = serde_json::json!({
            "messages": vec![serde_json::json!({"role": "user", "content": "a"}); MAX_MESSAGES + 1],
        });
        assert!(ChatRequest::parse(many.as_object().unwrap()).is_err());

        // The total is inclusive too: 8 x 16 000 characters is accepted, one more is not.
        assert_eq!(MAX_TOTAL_CONTENT_CHARS % MAX_CONTENT_CHARS, 0);
        let full = serde_json::json!({"role": "user", "content": "a".repeat(MAX_CONTENT_CHARS)});
        let mut messages = vec![full; MAX_TOTAL_CONTENT_CHARS / MAX_CONTENT_CHARS];
        let body = serde_json::json!({ "messages": messages });
        assert!(ChatRequest::parse(body.as_object().unwrap()).is_ok());
        messages.push(serde_json::json!({"role": "user", "content": "b"}));
        let body = serde_json::json!({ "messages": messages });
        assert_eq!(
            ChatRequest::parse(body.as_object().unwrap())
                .unwrap_err()
                .to_string(),
            "messages must have at most 128000 characters of content in all"
        );
    }
}
