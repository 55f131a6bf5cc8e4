//! POST /api/chat: one assistant reply from the model provider.

use http::StatusCode;
use serde::Serialize;

use super::{Request, Response, json_response};
use crate::api::error::ApiError;
use crate::api::json::parse_object;
use crate::domain::chat::{ChatRequest, Role};
use crate::model::{ModelProvider, ModelRequest, Usage};

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

pub async fn chat(model: &dyn ModelProvider, request: Request) -> Result<Response, ApiError> {
    let chat = ChatRequest::parse(&parse_object(request.body())?)?;
    let reply = model
        .complete(ModelRequest {
            model: chat.model.as_str().to_owned(),
            messages: chat.messages,
            max_tokens: chat.max_tokens,
            response_format: None,
        })
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &ChatResponse {
            message: AssistantMessage {
                role: Role::Assistant,
                content: reply.content,
            },
            tokens_used: reply.usage.total_tokens,
            usage: reply.usage,
        },
    ))
}
