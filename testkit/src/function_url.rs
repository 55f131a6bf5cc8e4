//! The streaming chat function (`chat-stream`) behind a stand-in Lambda function URL with
//! `InvokeMode: RESPONSE_STREAM`, as deployed: each request becomes the payload v2 event a
//! function URL sends (`routeKey` `$default`), is read as the runtime reads it
//! (`LambdaEvent<LambdaRequest>` from the bytes) and goes through `lambda_http::StreamAdapter`
//! (what `lambda_http::run_with_streaming_response` wraps around the handler) into
//! `koe::app::lambda::chat_stream::handle_event`. The adapter's metadata prelude (status,
//! headers, cookies) becomes the answer's head, and its body stream is passed on chunk by chunk
//! as it is produced, as Lambda passes a streamed response through the URL.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use koe::App;
use koe::app::edge::Service;
use koe::app::lambda::chat_stream;
use koe::chat::api::ChatStream;
use koe::platform::config::ConfigError;
use koe::platform::endpoint::Endpoint;
use lambda_http::lambda_runtime::{Context, LambdaEvent};
use lambda_http::request::LambdaRequest;
use lambda_http::{Service as _, StreamAdapter};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A function URL's request payload cap (6 MB, Lambda's invocation payload).
pub const PAYLOAD_LIMIT: usize = 6 * 1024 * 1024;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Answer = http::Response<BoxBody<Bytes, BoxError>>;

/// The function URL on a free loopback port; dropping it stops it.
pub struct FunctionUrl {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for FunctionUrl {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Builds the chat service from `app` as the `chat-stream` binary does and serves it.
pub async fn start(app: &App) -> Result<FunctionUrl, ConfigError> {
    let service = Arc::new(app.service::<ChatStream>().await?);
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("a bound address");
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                continue;
            };
            let service = service.clone();
            tokio::spawn(async move {
                let serve = hyper::service::service_fn(move |request| {
                    let service = service.clone();
                    async move { Ok::<_, Infallible>(answer(service, request, peer).await) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), serve)
                    .await;
            });
        }
    });
    Ok(FunctionUrl { addr, task })
}

async fn answer(
    service: Arc<Service<ChatStream>>,
    request: hyper::Request<Incoming>,
    peer: SocketAddr,
) -> Answer {
    let (parts, body) = request.into_parts();
    let Ok(body) = Limited::new(body, PAYLOAD_LIMIT).collect().await else {
        return plain(StatusCode::PAYLOAD_TOO_LARGE, "Request Entity Too Large");
    };
    let body = body.to_bytes();
    let request_id = crate::gateway::uuid();
    let mut event = crate::gateway::event(
        &ChatStream::ROUTE,
        &parts,
        &body,
        peer.ip(),
        &request_id,
        SystemTime::now(),
    );
    event["routeKey"] = "$default".into();
    event["requestContext"]["routeKey"] = "$default".into();
    event["requestContext"]["apiId"] = "chatstreamurlid".into();
    let bytes = serde_json::to_vec(&event).expect("an event is JSON");
    let Ok(payload) = serde_json::from_slice::<LambdaRequest>(&bytes) else {
        return plain(StatusCode::BAD_GATEWAY, "Bad Gateway");
    };
    let mut context = Context::default();
    context.request_id = crate::gateway::uuid();
    context.invoked_function_arn =
        "arn:aws:lambda:eu-west-1:123456789012:function:chat-stream".into();
    context.deadline = (SystemTime::now() + Duration::from_secs(60))
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut adapter = StreamAdapter::from(lambda_http::service_fn(
        move |request: lambda_http::Request| {
            let service = service.clone();
            async move { Ok::<_, Infallible>(chat_stream::handle_event(&service, request).await) }
        },
    ));
    let Ok(()) = std::future::poll_fn(|cx| adapter.poll_ready(cx)).await;
    let Ok(streamed) = adapter.call(LambdaEvent::new(payload, context)).await;
    let prelude = streamed.metadata_prelude;
    let mut answer = http::Response::new(Streamed(streamed.stream).boxed());
    *answer.status_mut() = prelude.status_code;
    *answer.headers_mut() = prelude.headers;
    for cookie in prelude.cookies {
        let value = HeaderValue::from_str(&cookie).expect("a cookie is a header value");
        answer.headers_mut().append(header::SET_COOKIE, value);
    }
    answer
}

/// The adapter's body stream as an HTTP body.
struct Streamed<S>(S);

impl<S, E> hyper::body::Body for Streamed<S>
where
    S: futures_core::Stream<Item = Result<Bytes, E>> + Unpin,
    E: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.0)
            .poll_next(cx)
            .map(|item| item.map(|r| r.map(Frame::data).map_err(Into::into)))
    }
}

/// Lambda's own answers for a function URL (the function did not answer).
fn plain(status: StatusCode, message: &str) -> Answer {
    let body = serde_json::json!({ "Message": message }).to_string();
    let mut answer = http::Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *answer.status_mut() = status;
    answer.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    answer
}
