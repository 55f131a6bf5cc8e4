//! The stand-in's server: it answers each request as scripted, at once or streamed by token.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::{Behaviour, Pace, Received, State, tokens};

pub(super) async fn serve(listener: TcpListener, state: Arc<Mutex<State>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        // Streamed replies are many small writes (as OpenAI's, which are not held back).
        let _ = stream.set_nodelay(true);
        let connection_state = state.clone();
        let connection = tokio::spawn(async move {
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let state = connection_state.clone();
                async move { answer(&state, request).await.ok_or(Disconnected) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        let mut state = state.lock().unwrap();
        state.connections.retain(|c| !c.is_finished());
        state.connections.push(connection.abort_handle());
    }
}

/// The service's error: hyper closes the connection without an answer.
#[derive(Debug)]
struct Disconnected;

impl std::fmt::Display for Disconnected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stand-in disconnects (scripted)")
    }
}

impl std::error::Error for Disconnected {}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Reply = hyper::Response<BoxBody<Bytes, BoxError>>;

/// The answer to one request; `None` drops the connection.
async fn answer(
    state: &Mutex<State>,
    request: hyper::Request<hyper::body::Incoming>,
) -> Option<Reply> {
    let path_ok =
        request.method() == http::Method::POST && request.uri().path() == "/v1/chat/completions";
    let authorization = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = crate::loopback::body_bytes(request.into_body()).await;
    if !path_ok {
        return Some(respond(
            404,
            json!({"error": {"message": "unknown path"}}).to_string(),
        ));
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = body["model"].as_str().unwrap_or("unknown").to_owned();
    let schema = (body["response_format"]["type"] == "json_schema")
        .then(|| body["response_format"]["json_schema"]["schema"].clone());
    let streaming = body["stream"] == true;
    let behaviour = {
        let mut state = state.lock().unwrap();
        if state.down {
            return None;
        }
        state.received.push(Received {
            authorization,
            body,
        });
        let default = state.default.clone();
        state.script.pop_front().unwrap_or(default)
    };
    perform(behaviour, &model, schema.as_ref(), streaming).await
}

async fn perform(
    mut behaviour: Behaviour,
    model: &str,
    schema: Option<&Value>,
    streaming: bool,
) -> Option<Reply> {
    loop {
        match behaviour {
            Behaviour::Delay(by, inner) => {
                tokio::time::sleep(by).await;
                behaviour = *inner;
            }
            Behaviour::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return Some(respond(504, String::new()));
            }
            Behaviour::Disconnect => return None,
            Behaviour::Raw { status, body } => return Some(respond(status, body)),
            Behaviour::SchemaValid { text } => {
                let content = match schema {
                    Some(schema) => schema_instance(schema, None).to_string(),
                    None => text,
                };
                behaviour = Behaviour::complete(content);
            }
            Behaviour::Complete {
                content,
                prompt_tokens,
                completion_tokens,
            } if streaming => {
                behaviour = Behaviour::Stream {
                    content,
                    prompt_tokens,
                    completion_tokens,
                    pace: Pace::INSTANT,
                    fail_after: None,
                };
            }
            Behaviour::Stream {
                content,
                prompt_tokens,
                completion_tokens,
                pace,
                fail_after,
            } => {
                if streaming {
                    let usage = (prompt_tokens, completion_tokens);
                    return Some(stream(content, usage, model, pace, fail_after));
                }
                tokio::time::sleep(pace.duration(tokens(&content).len())).await;
                behaviour = match fail_after {
                    Some(_) => Behaviour::server_error(),
                    None => Behaviour::Complete {
                        content,
                        prompt_tokens,
                        completion_tokens,
                    },
                };
            }
            Behaviour::Complete {
                content,
                prompt_tokens,
                completion_tokens,
            } => {
                let body = json!({
                    "id": "chatcmpl-standin",
                    "object": "chat.completion",
                    "created": 1767225600,
                    "model": model,
                    "choices": [{
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": null},
                        "logprobs": null,
                        "finish_reason": "stop"
                    }],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + completion_tokens
                    }
                });
                return Some(respond(200, body.to_string()));
            }
        }
    }
}

/// A small JSON value valid against `schema`, the subset of JSON Schema that strict structured
/// output uses (`type`, `enum`, `properties`, `required`, `items`, `anyOf`): every property is
/// filled, `anyOf` takes its first branch, an enum its first value, an array holds one item.
/// A string property named `from` or `to` is an RFC 3339 time (now, and a day later), so a plan
/// of date ranges is valid too; other strings are short text.
pub fn schema_instance(schema: &Value, name: Option<&str>) -> Value {
    if let Some(first) = schema["anyOf"].as_array().and_then(|b| b.first()) {
        return schema_instance(first, name);
    }
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    let kind = match &schema["type"] {
        Value::Array(kinds) => kinds
            .iter()
            .find(|k| *k != "null")
            .and_then(Value::as_str)
            .unwrap_or("null"),
        other => other.as_str().unwrap_or("object"),
    };
    match kind {
        "object" => Value::Object(
            schema["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(key, sub)| (key.clone(), schema_instance(sub, Some(key))))
                .collect(),
        ),
        "array" => Value::Array(vec![schema_instance(&schema["items"], None)]),
        "string" => {
            let now = chrono::Utc::now();
            match name {
                Some("from") => json!(now.to_rfc3339()),
                Some("to") => json!((now + chrono::Duration::days(1)).to_rfc3339()),
                _ => json!("stand-in reply"),
            }
        }
        "integer" | "number" => json!(1),
        "boolean" => json!(true),
        _ => Value::Null,
    }
}

fn respond(status: u16, body: String) -> Reply {
    let body = Full::new(Bytes::from(body)).map_err(|never| match never {});
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(body.boxed())
        .unwrap()
}

/// A streamed completion as OpenAI writes one: a first chunk with the role, one chunk per
/// token at `pace`, a chunk with the finish reason, the usage chunk, `[DONE]`. With
/// `fail_after`, the body breaks off (an error frame: hyper drops the connection) after that
/// many tokens.
fn stream(
    content: String,
    (prompt_tokens, completion_tokens): (u64, u64),
    model: &str,
    pace: Pace,
    fail_after: Option<usize>,
) -> Reply {
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, BoxError>>(16);
    let model = model.to_owned();
    tokio::spawn(async move {
        let chunk = |delta: Value, finish: Value, usage: Value| {
            let choices = if delta.is_null() {
                json!([])
            } else {
                json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}])
            };
            let body = json!({
                "id": "chatcmpl-standin", "object": "chat.completion.chunk",
                "created": 1767225600, "model": model, "system_fingerprint": null,
                "choices": choices, "usage": usage,
            });
            Ok(Bytes::from(format!("data: {body}\n\n")))
        };
        let send = |item| sender.send(item);
        tokio::time::sleep(pace.first_token).await;
        let role = json!({"role": "assistant", "content": "", "refusal": null});
        if send(chunk(role, Value::Null, Value::Null)).await.is_err() {
            return;
        }
        for (i, token) in tokens(&content).into_iter().enumerate() {
            if fail_after == Some(i) {
                // Let the tokens before go out first (hyper drops what is unsent on an error).
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = send(Err("stand-in breaks off (scripted)".into())).await;
                return;
            }
            if i > 0 {
                tokio::time::sleep(pace.gap()).await;
            }
            if send(chunk(json!({"content": token}), Value::Null, Value::Null))
                .await
                .is_err()
            {
                return;
            }
        }
        let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens});
        let _ = send(chunk(json!({}), json!("stop"), Value::Null)).await;
        let _ = send(chunk(Value::Null, Value::Null, usage)).await;
        let _ = send(Ok(Bytes::from_static(b"data: [DONE]\n\n"))).await;
    });
    hyper::Response::builder()
        .status(200)
        .header("content-type", "text/event-stream; charset=utf-8")
        .body(ChannelBody(receiver).boxed())
        .unwrap()
}

/// A body whose frames arrive through a channel; an `Err` ends it as a broken body.
struct ChannelBody(tokio::sync::mpsc::Receiver<Result<Bytes, BoxError>>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        self.0
            .poll_recv(cx)
            .map(|item| item.map(|r| r.map(hyper::body::Frame::data)))
    }
}
