//! POST /api/chat: one assistant reply from the model provider.

use http::StatusCode;
use serde::Serialize;

use crate::domain::chat::{ChatRequest, Role};
use crate::model::{ModelProvider, ModelReply, ModelRequest, Usage};
use crate::platform::error::ApiError;
use crate::platform::json::parse_object;
use crate::platform::{Request, Response, json_response};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ChatResponse {
    message: AssistantMessage,
    tokens_used: u64,
    usage: Usage,
}

#[derive(Serialize)]
struct AssistantMessage {
    role: Role,
    content: String,
}

/// The request to the model, from the body (400 if the body is not a valid chat request).
pub(crate) fn model_request(request: &Request) -> Result<ModelRequest, ApiError> {
    let chat = ChatRequest::parse(&parse_object(request.body())?)?;
    Ok(ModelRequest {
        model: chat.model.as_str().to_owned(),
        messages: chat.messages,
        max_tokens: chat.max_tokens,
        response_format: None,
    })
}

/// The 200 answer's body for a reply: the same for the JSON answer and a stream's `done` event.
pub(crate) fn answer(reply: ModelReply) -> impl Serialize {
    ChatResponse {
        message: AssistantMessage {
            role: Role::Assistant,
            content: reply.content,
        },
        tokens_used: reply.usage.total_tokens,
        usage: reply.usage,
    }
}

/// POST /api/chat. The completion, its spend counters included, runs within `budget`
/// (`PROVIDER_TIMEOUT_MS`): with an error notification it fits the function's timeout.
pub async fn chat(
    model: &dyn ModelProvider,
    budget: std::time::Duration,
    request: Request,
) -> Result<Response, ApiError> {
    let completion = model.complete(model_request(&request)?);
    let reply = match tokio::time::timeout(budget, completion).await {
        Ok(reply) => reply?,
        Err(_) => {
            tracing::warn!(
                budget_ms = budget.as_millis() as u64,
                "chat ran out of its time budget"
            );
            return Err(crate::model::ProviderError::Timeout.into());
        }
    };
    Ok(json_response(StatusCode::OK, &answer(reply)))
}
