//! POST /api/chat with `Accept: text/event-stream`: the reply as server-sent events while the
//! model writes it.
//!
//! Events, in order: `delta` `{"text"}` for each piece of text as it arrives; `sentence`
//! `{"index", "text"}` for each completed sentence (`domain::sentences`: what a voice client
//! speaks); then exactly one of `done` (data: the JSON answer's body, byte for byte what the JSON
//! path answers for the same model output) or `error` (data: the contract's error body, with the
//! code the JSON path would have answered). A failure before the first event is no stream at
//! all: the JSON path's status and error body.

use std::collections::VecDeque;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::json;

use super::handler::{answer, model_request};
use crate::domain::sentences::SentenceCutter;
use crate::model::{ModelReply, ReplyChunk, ReplyStream, StreamingModel, Usage};
use crate::platform::Request;
use crate::platform::error::ApiError;

pub const EVENT_STREAM: &str = "text/event-stream";

/// Whether the request asks for the streamed answer: `Accept` names `text/event-stream` (any
/// parameters, any position in the list, any case), and not with `q=0`.
pub fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            media.eq_ignore_ascii_case(EVENT_STREAM) && !refused
        })
}

/// One server-sent event of the answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatEvent {
    Delta(String),
    Sentence { index: usize, text: String },
    Done(Vec<u8>),
    Error(ApiError),
}

impl ChatEvent {
    pub fn name(&self) -> &'static str {
        match self {
            ChatEvent::Delta(_) => "delta",
            ChatEvent::Sentence { .. } => "sentence",
            ChatEvent::Done(_) => "done",
            ChatEvent::Error(_) => "error",
        }
    }

    /// The event on the wire: `event: <name>`, one `data:` line of JSON, a blank line.
    pub fn to_bytes(&self) -> Bytes {
        let data = match self {
            ChatEvent::Delta(text) => json!({ "text": text }).to_string().into_bytes(),
            ChatEvent::Sentence { index, text } => json!({ "index": index, "text": text })
                .to_string()
                .into_bytes(),
            ChatEvent::Done(body) => body.clone(),
            ChatEvent::Error(error) => error.body(),
        };
        let mut out = Vec::with_capacity(data.len() + 32);
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(self.name().as_bytes());
        out.extend_from_slice(b"\ndata: ");
        out.extend_from_slice(&data);
        out.extend_from_slice(b"\n\n");
        Bytes::from(out)
    }
}

/// An answer being streamed: pull its events with [`ChatEvents::next`].
pub struct ChatEvents {
    reply: Box<dyn ReplyStream>,
    /// The provider's first chunk (read before the answer started), not yet turned into events.
    first: Option<Option<ReplyChunk>>,
    cutter: SentenceCutter,
    sentences: usize,
    content: String,
    usage: Usage,
    queue: VecDeque<ChatEvent>,
    finished: bool,
}

/// Opens the stream: parses the request and waits for the provider's first piece of the reply,
/// so that every failure up to then is an ordinary error answer.
pub async fn chat_stream(
    model: &dyn StreamingModel,
    request: Request,
) -> Result<ChatEvents, ApiError> {
    let mut reply = model.stream(model_request(&request)?).await?;
    let first = match reply.next().await {
        Some(Err(e)) => return Err(e.into()),
        Some(Ok(chunk)) => Some(chunk),
        None => None,
    };
    Ok(ChatEvents {
        reply,
        first: Some(first),
        cutter: SentenceCutter::new(),
        sentences: 0,
        content: String::new(),
        usage: Usage::default(),
        queue: VecDeque::new(),
        finished: false,
    })
}

impl ChatEvents {
    /// The next event, as soon as it is known; `None` after `done` or `error`.
    pub async fn next(&mut self) -> Option<ChatEvent> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Some(event);
            }
            if self.finished {
                return None;
            }
            let chunk = match self.first.take() {
                Some(first) => first.map(Ok),
                None => self.reply.next().await,
            };
            match chunk {
                Some(Ok(ReplyChunk::Text(text))) => {
                    self.content.push_str(&text);
                    let sentences = self.cutter.push(&text);
                    self.queue.push_back(ChatEvent::Delta(text));
                    for sentence in sentences {
                        self.sentence(sentence);
                    }
                }
                Some(Ok(ReplyChunk::Usage(usage))) => self.usage = usage,
                Some(Err(e)) => {
                    self.finished = true;
                    self.queue.push_back(ChatEvent::Error(e.into()));
                }
                None => {
                    self.finished = true;
                    if let Some(last) = self.cutter.finish() {
                        self.sentence(last);
                    }
                    let reply = ModelReply {
                        content: std::mem::take(&mut self.content),
                        usage: self.usage,
                    };
                    let body = serde_json::to_vec(&answer(reply)).expect("answers serialize");
                    self.queue.push_back(ChatEvent::Done(body));
                }
            }
        }
    }

    fn sentence(&mut self, text: String) {
        let index = self.sentences;
        self.sentences += 1;
        self.queue.push_back(ChatEvent::Sentence { index, text });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::ACCEPT, value.parse().unwrap());
        headers
    }

    #[test]
    fn streaming_is_asked_for_by_accept() {
        assert!(wants_stream(&accept("text/event-stream")));
        assert!(wants_stream(&accept(
            "application/json;q=0.5, Text/Event-Stream"
        )));
        assert!(!wants_stream(&accept("application/json")));
        assert!(!wants_stream(&accept("*/*")));
        assert!(!wants_stream(&accept("text/event-stream;q=0")));
        assert!(!wants_stream(&HeaderMap::new()));
    }

    #[test]
    fn events_are_one_json_data_line_each() {
        let event = ChatEvent::Delta("a\nb".into());
        assert_eq!(
            event.to_bytes(),
            Bytes::from_static(b"event: delta\ndata: {\"text\":\"a\\nb\"}\n\n")
        );
        let error = ChatEvent::Error(ApiError::new(
            crate::platform::error::ErrorCode::ProviderError,
            "the model provider failed",
        ));
        assert_eq!(
            error.to_bytes(),
            Bytes::from_static(
                b"event: error\ndata: {\"code\":\"PROVIDER_ERROR\",\"message\":\"the model provider failed\",\"error\":\"the model provider failed\"}\n\n"
            )
        );
    }
}
