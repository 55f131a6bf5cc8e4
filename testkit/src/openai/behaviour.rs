//! The scripted behaviours' constructors: answers, refusals, errors, streams and delays.

use std::time::Duration;

use serde_json::json;

use super::{Behaviour, Pace};

impl Behaviour {
    /// The agent's planner deciding to answer at once (`POST /agent` round 1): `reply`, said
    /// with `emotion`.
    pub fn agent_answer(reply: &str, emotion: &str) -> Behaviour {
        let decision = json!({"decision": {"type": "answer", "reply": reply, "emotion": emotion}});
        Behaviour::complete(decision.to_string())
    }

    pub fn complete(content: impl Into<String>) -> Behaviour {
        Behaviour::Complete {
            content: content.into(),
            prompt_tokens: 40,
            completion_tokens: 17,
        }
    }

    /// A completion whose message has no content, as OpenAI answers a refusal.
    pub fn refusal() -> Behaviour {
        Behaviour::Raw {
            status: 200,
            body: json!({
                "id": "chatcmpl-x", "object": "chat.completion", "model": "gpt-4o-mini",
                "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": null,
                        "refusal": "I can't help with that."}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
            })
            .to_string(),
        }
    }

    /// OpenAI's error answer: `status`, and an `error` object of `message`, `type` and `code`.
    fn error(status: u16, message: &str, kind: &str, code: Option<&str>) -> Behaviour {
        let error = json!({"message": message, "type": kind, "param": null, "code": code});
        Behaviour::Raw {
            status,
            body: json!({ "error": error }).to_string(),
        }
    }

    /// OpenAI's answer when the account's quota is exhausted.
    pub fn insufficient_quota() -> Behaviour {
        let message =
            "You exceeded your current quota, please check your plan and billing details.";
        Behaviour::error(
            429,
            message,
            "insufficient_quota",
            Some("insufficient_quota"),
        )
    }

    /// OpenAI's answer when a rate limit is hit (retryable).
    pub fn rate_limited() -> Behaviour {
        let message = "Rate limit reached for requests";
        Behaviour::error(429, message, "requests", Some("rate_limit_exceeded"))
    }

    pub fn server_error() -> Behaviour {
        let message = "The server had an error while processing your request.";
        Behaviour::error(500, message, "server_error", None)
    }

    pub fn garbage() -> Behaviour {
        Behaviour::Raw {
            status: 200,
            body: "<html>not json</html>".into(),
        }
    }

    /// [`Behaviour::SchemaValid`] with a plain-text fallback.
    pub fn schema_valid() -> Behaviour {
        Behaviour::SchemaValid {
            text: "stand-in reply".into(),
        }
    }

    /// `content` written at `pace`, with the default usage (40 + 17 tokens).
    pub fn streamed(content: impl Into<String>, pace: Pace) -> Behaviour {
        Behaviour::Stream {
            content: content.into(),
            prompt_tokens: 40,
            completion_tokens: 17,
            pace,
            fail_after: None,
        }
    }

    /// `content` written at `pace`, breaking off after `tokens` tokens.
    pub fn streamed_failing(content: impl Into<String>, pace: Pace, tokens: usize) -> Behaviour {
        match Behaviour::streamed(content, pace) {
            Behaviour::Stream {
                content,
                prompt_tokens,
                completion_tokens,
                pace,
                ..
            } => Behaviour::Stream {
                content,
                prompt_tokens,
                completion_tokens,
                pace,
                fail_after: Some(tokens),
            },
            _ => unreachable!(),
        }
    }

    pub fn delayed(self, by: Duration) -> Behaviour {
        Behaviour::Delay(by, Box::new(self))
    }
}
