//! OpenAI's streamed chat completion, read from reqwest's body chunk by chunk: server-sent events
//! whose `data` is a `chat.completion.chunk` (text in `choices[0].delta.content`), the usage in a
//! last chunk with no choices (`stream_options.include_usage`), then `data: [DONE]`.

use async_trait::async_trait;
use serde::Deserialize;
use tokio::time::Instant;

use super::{ProviderError, ReplyChunk, ReplyStream, Usage};

/// OpenAI's `usage` object, in a completion and in a stream's last chunk.
#[derive(Deserialize)]
pub(super) struct UsageBody {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    total_tokens: u64,
}

impl UsageBody {
    pub(super) fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            total_tokens: if self.total_tokens > 0 {
                self.total_tokens
            } else {
                self.prompt_tokens + self.completion_tokens
            },
        }
    }
}

/// A streamed reply being read.
pub(super) struct SseReply {
    response: Option<reqwest::Response>,
    deadline: Instant,
    lines: LineBuffer,
    /// The `data` lines of the event being read.
    data: String,
    /// Chunks parsed but not yet handed out.
    ready: std::collections::VecDeque<ReplyChunk>,
    done: bool,
}

impl SseReply {
    pub(super) fn new(response: reqwest::Response, deadline: Instant) -> SseReply {
        SseReply {
            response: Some(response),
            deadline,
            lines: LineBuffer::default(),
            data: String::new(),
            ready: Default::default(),
            done: false,
        }
    }

    /// Ends the stream with `error`: nothing is read after it.
    fn fail(&mut self, error: ProviderError) -> Option<Result<ReplyChunk, ProviderError>> {
        tracing::warn!(error = ?error, "model provider stream failed");
        self.response = None;
        self.done = true;
        Some(Err(error))
    }

    /// Takes in one line of the event stream.
    fn line(&mut self, line: &str) -> Result<(), ProviderError> {
        if line.is_empty() {
            let data = std::mem::take(&mut self.data);
            if !data.is_empty() {
                self.event(&data)?;
            }
        } else if let Some(value) = line.strip_prefix("data:") {
            if !self.data.is_empty() {
                self.data.push('\n');
            }
            self.data.push_str(value.strip_prefix(' ').unwrap_or(value));
        }
        // Comments (`: ...`), `event:`, `id:` and `retry:` lines carry nothing we use.
        Ok(())
    }

    /// One event's data: a chunk, an error, or the end.
    fn event(&mut self, data: &str) -> Result<(), ProviderError> {
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: ChunkBody = serde_json::from_str(data)
            .map_err(|_| ProviderError::BadResponse("stream chunk is not JSON".into()))?;
        if chunk.error.is_some() {
            return Err(ProviderError::Upstream("error event in the stream".into()));
        }
        let text = chunk
            .choices
            .into_iter()
            .next()
            .and_then(|c| c.delta.content)
            .filter(|t| !t.is_empty());
        if let Some(text) = text {
            self.ready.push_back(ReplyChunk::Text(text));
        }
        if let Some(usage) = chunk.usage {
            self.ready.push_back(ReplyChunk::Usage(usage.usage()));
        }
        Ok(())
    }
}

#[async_trait]
impl ReplyStream for SseReply {
    async fn next(&mut self) -> Option<Result<ReplyChunk, ProviderError>> {
        loop {
            if let Some(chunk) = self.ready.pop_front() {
                return Some(Ok(chunk));
            }
            if self.done {
                self.response = None;
                return None;
            }
            let response = self.response.as_mut()?;
            let bytes = match tokio::time::timeout_at(self.deadline, response.chunk()).await {
                Err(_elapsed) => return self.fail(ProviderError::Timeout),
                Ok(Err(e)) if e.is_timeout() => return self.fail(ProviderError::Timeout),
                Ok(Err(_)) => {
                    return self.fail(ProviderError::Upstream("stream broke off".into()));
                }
                Ok(Ok(None)) => {
                    return self.fail(ProviderError::Upstream("stream ended before [DONE]".into()));
                }
                Ok(Ok(Some(bytes))) => bytes,
            };
            let lines = self.lines.push(&bytes);
            for line in lines {
                if let Err(e) = self.line(&line) {
                    return self.fail(e);
                }
                if self.done {
                    break;
                }
            }
        }
    }
}

/// Splits a byte stream into lines (`\n`, `\r\n` or `\r`), a line's UTF-8 kept whole across
/// chunk boundaries.
#[derive(Default)]
struct LineBuffer {
    pending: Vec<u8>,
}

impl LineBuffer {
    fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(bytes);
        let mut lines = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while i < self.pending.len() {
            match self.pending[i] {
                b'\n' => {
                    lines.push(String::from_utf8_lossy(&self.pending[start..i]).into_owned());
                    start = i + 1;
                }
                b'\r' if i + 1 < self.pending.len() => {
                    lines.push(String::from_utf8_lossy(&self.pending[start..i]).into_owned());
                    if self.pending[i + 1] == b'\n' {
                        i += 1;
                    }
                    start = i + 1;
                }
                // A `\r` at the end: wait for the next byte (it may be the `\n` of `\r\n`).
                b'\r' => break,
                _ => {}
            }
            i += 1;
        }
        self.pending.drain(..start);
        lines
    }
}

#[derive(Deserialize)]
struct ChunkBody {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    #[serde(default)]
    usage: Option<UsageBody>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    delta: Delta,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_chunks_and_line_ends() {
        let mut lines = LineBuffer::default();
        assert_eq!(lines.push(b"data: {\"a\""), Vec::<String>::new());
        assert_eq!(lines.push(b":1}\r"), Vec::<String>::new());
        assert_eq!(lines.push(b"\n\r\n"), vec!["data: {\"a\":1}", ""]);
        // A multi-byte character cut in two by the chunking.
        let text = "data: こんにちは\n".as_bytes();
        assert_eq!(lines.push(&text[..8]), Vec::<String>::new());
        assert_eq!(lines.push(&text[8..]), vec!["data: こんにちは"]);
    }
}
