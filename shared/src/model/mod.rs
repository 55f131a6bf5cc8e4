//! The `ModelProvider` port: one completion from a chat model.

use async_trait::async_trait;
use serde::Serialize;

use crate::domain::chat::ChatMessage;

pub mod openai;
mod openai_stream;

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

/// A whole reply, as one text chunk and its usage (for providers that cannot stream).
pub struct WholeReply(std::vec::IntoIter<ReplyChunk>);

impl WholeReply {
    pub fn new(reply: ModelReply) -> WholeReply {
        WholeReply(
            vec![
                ReplyChunk::Text(reply.content),
                ReplyChunk::Usage(reply.usage),
            ]
            .into_iter(),
        )
    }
}

#[async_trait]
impl ReplyStream for WholeReply {
    async fn next(&mut self) -> Option<Result<ReplyChunk, ProviderError>> {
        self.0.next().map(Ok)
    }
}

#[async_trait]
pub trait ModelProvider: Send + Sync {
    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, ProviderError>;

    /// The reply as it is written. Errors before the provider starts its answer (not
    /// configured, refused, unreachable) come here; errors after it, from the stream. A
    /// provider that cannot stream gives its whole reply as one chunk.
    async fn stream(&self, request: ModelRequest) -> Result<Box<dyn ReplyStream>, ProviderError> {
        Ok(Box::new(WholeReply::new(self.complete(request).await?)))
    }
}
