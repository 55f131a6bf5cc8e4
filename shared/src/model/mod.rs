//! The `ModelProvider` port: one completion from a chat model.

use async_trait::async_trait;
use http::HeaderValue;
use serde::Serialize;

use crate::domain::chat::ChatMessage;
use crate::platform::error::{ApiError, ErrorCode};

pub mod openai;
mod openai_stream;
pub mod spend_guard;

#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub max_tokens: u32,
    /// An OpenAI `response_format` value (e.g. a `json_schema`) for structured output.
    pub response_format: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelReply {
    pub content: String,
    pub usage: Usage,
}

/// Why a completion failed. Each maps to one contract error code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderError {
    /// No API key is configured.
    NotConfigured,
    /// The time budget ran out.
    Timeout,
    /// The provider says the account's quota or credits are exhausted.
    InsufficientCredits,
    /// The provider failed (5xx, other 4xx, connection refused after the retry).
    Upstream(String),
    /// The provider answered 2xx with something that is not a usable completion.
    BadResponse(String),
    /// The API's daily model-token ceiling is reached (`crate::model::spend_guard`); no model was called.
    /// `notify`: this is the day's first refusal, the one that notifies the team.
    CeilingReached { notify: bool, retry_after_secs: u64 },
    /// The spend counter was throttled: the call is refused uncounted rather than let through
    /// uncounted (`crate::model::spend_guard`); no model was called.
    CounterBusy { retry_after_secs: u64 },
}

/// One piece of a streamed reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyChunk {
    /// The next piece of the reply's text.
    Text(String),
    /// The reply's token counts (the provider sends them last).
    Usage(Usage),
}

/// A reply as the provider writes it. `next` gives each chunk as it arrives, then `None` once
/// the provider has finished; an `Err` ends the stream (nothing follows it).
#[async_trait]
pub trait ReplyStream: Send {
    async fn next(&mut self) -> Option<Result<ReplyChunk, ProviderError>>;
}

#[async_trait]
pub trait ModelProvider: Send + Sync {
    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, ProviderError>;
}

/// A chat model that can hand out its reply as it is written. A port of its own, not a method
/// of [`ModelProvider`]: a function that only completes (chat, agent) then does not link the
/// streaming code through the provider's vtable.
#[async_trait]
pub trait StreamingModel: Send + Sync {
    /// The reply as it is written. Errors before the provider starts its answer (not
    /// configured, refused, unreachable) come here; errors after it, from the stream.
    async fn stream(&self, request: ModelRequest) -> Result<Box<dyn ReplyStream>, ProviderError>;
}

/// Each provider failure maps to one contract error code.
impl From<ProviderError> for ApiError {
    fn from(e: ProviderError) -> ApiError {
        if let ProviderError::CeilingReached {
            notify,
            retry_after_secs,
        } = e
        {
            let mut error = ApiError::new(
                ErrorCode::SpendCeilingReached,
                "the daily model token ceiling of this API is reached: try again after 00:00 \
                 Japan time (see Retry-After)",
            )
            .with_header(
                http::header::RETRY_AFTER,
                HeaderValue::from(retry_after_secs),
            );
            error.notify = notify;
            return error;
        }
        if let ProviderError::CounterBusy { retry_after_secs } = e {
            return ApiError::new(
                ErrorCode::ServiceUnavailable,
                "the spend counter is busy: retry later (see Retry-After)",
            )
            .with_header(
                http::header::RETRY_AFTER,
                HeaderValue::from(retry_after_secs),
            );
        }
        let (code, message) = match &e {
            ProviderError::NotConfigured => (
                ErrorCode::ProviderNotConfigured,
                "the model provider is not configured (OPENAI_API_KEY is not set)",
            ),
            ProviderError::Timeout => (
                ErrorCode::ProviderTimeout,
                "the model provider did not answer within the time budget",
            ),
            ProviderError::InsufficientCredits => (
                ErrorCode::InsufficientCredits,
                "the model provider account has no remaining quota or credits",
            ),
            ProviderError::Upstream(_) => (ErrorCode::ProviderError, "the model provider failed"),
            ProviderError::BadResponse(_) => (
                ErrorCode::ProviderBadResponse,
                "the model provider returned an unusable response",
            ),
            ProviderError::CeilingReached { .. } | ProviderError::CounterBusy { .. } => {
                unreachable!("answered above")
            }
        };
        ApiError::new(code, message)
    }
}
