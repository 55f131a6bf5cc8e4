//! OpenAI Chat Completions over HTTPS (reqwest + rustls), or any compatible server.
//!
//! One call has a total time budget (default 25 s, below API Gateway's cap). A connect error, a
//! 5xx or a rate-limit 429 is retried once after a short random pause if the budget still allows;
//! a quota 429 (`insufficient_quota`) is final.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::openai_stream::{SseReply, UsageBody};
use super::{
    ModelProvider, ModelReply, ModelRequest, ProviderError, ReplyStream, StreamingModel, Usage,
};
use crate::domain::chat::ChatMessage;
use crate::platform::config::{OpenAiConfig, Secret};
use crate::platform::secrets::LiveSecret;

pub struct OpenAi {
    client: reqwest::Client,
    /// Parsed once, not per call.
    endpoint: reqwest::Url,
    /// Read per call: a deployed function's key is a Secrets Manager secret, rotated without a
    /// deploy (`crate::platform::secrets`); OpenAI's 401 has it read again.
    api_key: LiveSecret,
    budget: Duration,
}

impl OpenAi {
    /// Builds the HTTP client once (per container); no network traffic happens here.
    pub fn new(config: &OpenAiConfig) -> OpenAi {
        let client = crate::platform::https::client_builder()
            .connect_timeout(Duration::from_secs(5).min(config.budget))
            .pool_idle_timeout(Duration::from_secs(50))
            .build()
            .expect("reqwest client builds with static settings");
        OpenAi {
            client,
            endpoint: format!("{}/chat/completions", config.base_url.trim_end_matches('/'))
                .parse()
                .expect("OPENAI_BASE_URL is checked to be an http(s) URL when it is read"),
            api_key: LiveSecret::fixed(
                "OPENAI_API_KEY",
                config.api_key.as_ref().map(|k| k.expose().to_owned()),
            ),
            budget: config.budget,
        }
    }

    /// The key from `key` (a deployed function's secret) instead of the configuration's.
    pub fn with_api_key(mut self, key: LiveSecret) -> OpenAi {
        self.api_key = key;
        self
    }
}

/// What a successful attempt gives: a whole completion, or (streaming) the open response whose
/// body is the stream of chunks.
enum Answer {
    Whole(ModelReply),
    Streaming(reqwest::Response),
}

/// What one attempt came to.
enum Attempt {
    Done(Result<Answer, ProviderError>),
    /// Worth one more try: connect failure, 5xx, or a rate-limit 429.
    Retryable(String),
}

#[derive(Deserialize)]
struct CompletionBody {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<UsageBody>,
}

#[derive(Deserialize)]
struct Choice {
    message: ChoiceMessage,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    content: Option<String>,
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: Option<ErrorDetail>,
}

#[derive(Deserialize)]
struct ErrorDetail {
    #[serde(rename = "type")]
    kind: Option<String>,
    code: Option<serde_json::Value>,
}

fn is_quota_error(body: &[u8]) -> bool {
    let Ok(ErrorEnvelope {
        error: Some(detail),
    }) = serde_json::from_slice(body)
    else {
        return false;
    };
    let quota = |s: &str| s == "insufficient_quota" || s == "billing_hard_limit_reached";
    detail.kind.as_deref().is_some_and(quota)
        || detail
            .code
            .as_ref()
            .and_then(|c| c.as_str())
            .is_some_and(quota)
}

fn parse_completion(body: &[u8]) -> Result<ModelReply, ProviderError> {
    let parsed: CompletionBody = serde_json::from_slice(body)
        .map_err(|_| ProviderError::BadResponse("body is not a chat completion".into()))?;
    let content = parsed
        .choices
        .into_iter()
        .next()
        .and_then(|c| c.message.content)
        .ok_or_else(|| ProviderError::BadResponse("completion has no message content".into()))?;
    let usage = parsed.usage.map_or(Usage::default(), |u| u.usage());
    Ok(ModelReply { content, usage })
}

impl OpenAi {
    /// `STREAMING` is a constant so that a function that never streams (chat, agent) does not
    /// link the streaming branches.
    async fn attempt<const STREAMING: bool>(&self, key: &Secret, body: &Bytes) -> Attempt {
        let sent = self
            .client
            .post(self.endpoint.clone())
            .bearer_auth(key.expose())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.clone())
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Attempt::Retryable("connect error".into()),
            Err(e) if e.is_timeout() => return Attempt::Done(Err(ProviderError::Timeout)),
            Err(_) => return Attempt::Done(Err(ProviderError::Upstream("request failed".into()))),
        };
        let status = response.status();
        if status.is_success() && STREAMING {
            return Attempt::Done(Ok(Answer::Streaming(response)));
        }
        let bytes = match response.bytes().await {
            Ok(b) => b,
            Err(e) if e.is_timeout() => return Attempt::Done(Err(ProviderError::Timeout)),
            Err(_) => {
                return Attempt::Done(Err(ProviderError::Upstream(format!(
                    "status {status}, body unreadable"
                ))));
            }
        };
        if status.is_success() {
            return Attempt::Done(parse_completion(&bytes).map(Answer::Whole));
        }
        if status == reqwest::StatusCode::PAYMENT_REQUIRED
            || (status == reqwest::StatusCode::TOO_MANY_REQUESTS && is_quota_error(&bytes))
        {
            return Attempt::Done(Err(ProviderError::InsufficientCredits));
        }
        if status == reqwest::StatusCode::UNAUTHORIZED {
            // The key may have been rotated: read it again (at most every half minute).
            let key = self.api_key.clone();
            tokio::spawn(async move { key.refused().await });
        }
        if status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            return Attempt::Retryable(format!("status {status}"));
        }
        Attempt::Done(Err(ProviderError::Upstream(format!("status {status}"))))
    }
}

/// A completion's request body, written straight from the request (no `Value` copy of it).
#[derive(Serialize)]
struct CompletionRequest<'a> {
    model: &'a str,
    messages: &'a [ChatMessage],
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

impl OpenAi {
    /// The request body of a completion (`stream: true` asks for chunks, usage in the last),
    /// serialized once for both attempts.
    fn body<const STREAMING: bool>(request: &ModelRequest) -> Bytes {
        let body = CompletionRequest {
            model: &request.model,
            messages: &request.messages,
            max_tokens: request.max_tokens,
            response_format: request.response_format.as_ref(),
            stream: STREAMING.then_some(true),
            stream_options: STREAMING.then_some(StreamOptions {
                include_usage: true,
            }),
        };
        serde_json::to_vec(&body)
            .expect("a completion request serializes: strings and numbers only")
            .into()
    }

    /// One call with its retry, within the budget; also gives the call's deadline (a stream
    /// must end by it too).
    async fn call<const STREAMING: bool>(
        &self,
        request: &ModelRequest,
    ) -> Result<(Answer, Instant), ProviderError> {
        let key = self.api_key.current().ok_or(ProviderError::NotConfigured)?;
        let key = &key;
        let body = OpenAi::body::<STREAMING>(request);
        let started = Instant::now();
        let deadline = started + self.budget;
        for attempt in 1..=2 {
            let outcome =
                tokio::time::timeout_at(deadline, self.attempt::<STREAMING>(key, &body)).await;
            let reason = match outcome {
                Err(_elapsed) => {
                    tracing::warn!(
                        attempt,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "model provider timed out"
                    );
                    return Err(ProviderError::Timeout);
                }
                Ok(Attempt::Done(result)) => {
                    if let Err(e) = &result {
                        tracing::warn!(attempt, error = ?e, "model provider call failed");
                    } else {
                        // Debug, not info: the request's access line has its latency, and a
                        // second line per request cost 3.5 % of the chat path's CPU.
                        tracing::debug!(attempt, elapsed_ms = started.elapsed().as_millis() as u64, model = %request.model, "model provider answered");
                    }
                    return result.map(|answer| (answer, deadline));
                }
                Ok(Attempt::Retryable(reason)) => reason,
            };
            let pause = Duration::from_millis(fastrand::u64(100..=400));
            if attempt == 2 || Instant::now() + pause >= deadline {
                tracing::warn!(attempt, %reason, "model provider failed, no retry left");
                return Err(ProviderError::Upstream(reason));
            }
            tracing::warn!(attempt, %reason, pause_ms = pause.as_millis() as u64, "model provider failed, retrying");
            tokio::time::sleep(pause).await;
        }
        unreachable!("the loop returns on its second attempt")
    }
}

#[async_trait]
impl ModelProvider for OpenAi {
    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, ProviderError> {
        match self.call::<false>(&request).await? {
            (Answer::Whole(reply), _) => Ok(reply),
            (Answer::Streaming(_), _) => unreachable!("asked for a whole completion"),
        }
    }
}

#[async_trait]
impl StreamingModel for OpenAi {
    /// OpenAI's streamed completion: server-sent events of chunks, usage in the last one. The
    /// retry applies until the provider answers 200; after that a failure ends the stream.
    async fn stream(&self, request: ModelRequest) -> Result<Box<dyn ReplyStream>, ProviderError> {
        match self.call::<true>(&request).await? {
            (Answer::Streaming(response), deadline) => {
                Ok(Box::new(SseReply::new(response, deadline)))
            }
            (Answer::Whole(_), _) => unreachable!("asked for a stream"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_errors_are_recognised_by_type_or_code() {
        assert!(is_quota_error(
            br#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#
        ));
        assert!(is_quota_error(
            br#"{"error":{"type":"requests","code":"insufficient_quota"}}"#
        ));
        assert!(!is_quota_error(
            br#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#
        ));
        assert!(!is_quota_error(b"not json"));
    }

    #[test]
    fn completions_without_content_are_bad_responses() {
        assert!(matches!(
            parse_completion(br#"{"choices":[]}"#),
            Err(ProviderError::BadResponse(_))
        ));
        assert!(matches!(
            parse_completion(br#"{"choices":[{"message":{"content":null,"refusal":"no"}}]}"#),
            Err(ProviderError::BadResponse(_))
        ));
        let reply = parse_completion(
            br#"{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
        )
        .unwrap();
        assert_eq!(reply.content, "hi");
        assert_eq!(reply.usage.total_tokens, 5);
    }
}
