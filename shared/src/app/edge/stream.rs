//! POST /api/chat answered as server-sent events (`Accept: text/event-stream`), through the same
//! edge as every request: the body cap, the request id, the error body and notification for a
//! failure before the stream starts, and after the stream ends its access-log line and, if it
//! ended in an `error` event, the error notification (a 5xx the JSON path would have answered).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use http_body::Frame;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::{Edge, Service, notify};
use crate::chat::api::ChatStream;
use crate::chat::stream::{ChatEvent, ChatEvents, EVENT_STREAM, chat_stream, wants_stream};
use crate::platform::Request;
use crate::platform::body::read_limited;
use crate::platform::endpoint::Route;
use crate::platform::error::{ApiError, ErrorCode};

/// Events waiting for a slow client; beyond that the model stream waits too.
const BUFFERED_EVENTS: usize = 64;

/// A response body that is whole (the JSON answer, an error) or streamed event by event.
pub struct EventBody(Inner);

enum Inner {
    Whole(Option<Bytes>),
    Events(mpsc::Receiver<Bytes>),
}

impl EventBody {
    pub fn whole(bytes: Bytes) -> EventBody {
        EventBody(Inner::Whole((!bytes.is_empty()).then_some(bytes)))
    }
}

impl http_body::Body for EventBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut self.0 {
            Inner::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Inner::Events(events) => events.poll_recv(cx).map(|e| e.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(&self.0, Inner::Whole(None))
    }
}

impl Service<ChatStream> {
    /// Answers POST /api/chat as the request asks: server-sent events with
    /// `Accept: text/event-stream`, else the JSON answer ([`Service::handle`]).
    pub async fn handle_streaming<B>(
        &self,
        request_id: &str,
        request: http::Request<B>,
    ) -> http::Response<EventBody>
    where
        B: http_body::Body<Data = Bytes> + Unpin,
    {
        if !wants_stream(request.headers()) {
            return self.handle(request_id, request).await.map(EventBody::whole);
        }
        let span = tracing::info_span!("request", request_id);
        let started = Instant::now();
        match self.open(request).instrument(span.clone()).await {
            Err(error) => {
                let response = self.finish(request_id, started, Err(error));
                response.instrument(span).await.map(EventBody::whole)
            }
            Ok(stream) => {
                let (sender, events) = mpsc::channel(BUFFERED_EVENTS);
                let pump = Pump {
                    edge: self.edge.clone(),
                    route: self.route.clone(),
                    request_id: request_id.to_owned(),
                    started,
                };
                tokio::spawn(pump.run(stream, sender).instrument(span));
                event_stream_response(request_id, EventBody(Inner::Events(events)))
            }
        }
    }

    async fn open<B>(&self, request: http::Request<B>) -> Result<ChatEvents, ApiError>
    where
        B: http_body::Body<Data = Bytes> + Unpin,
    {
        let (parts, body) = request.into_parts();
        let body = read_limited(body, self.route.body_limit).await?;
        chat_stream(self.ports.stream.as_ref(), Request::from_parts(parts, body)).await
    }
}

fn event_stream_response(request_id: &str, body: EventBody) -> http::Response<EventBody> {
    let mut response = http::Response::new(body);
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(EVENT_STREAM),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    // Proxies that buffer (nginx) pass the events on at once.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if let Ok(value) = HeaderValue::from_str(request_id) {
        headers.insert("x-request-id", value);
    }
    response
}

/// Moves a stream's events to the client, then logs how it ended.
struct Pump {
    edge: Edge,
    route: Route,
    request_id: String,
    started: Instant,
}

impl Pump {
    async fn run(self, mut stream: ChatEvents, sender: mpsc::Sender<Bytes>) {
        let mut first_event_ms = None;
        let mut events = 0u32;
        let mut code = None;
        let mut client_gone = false;
        while let Some(event) = stream.next().await {
            first_event_ms.get_or_insert(self.started.elapsed().as_millis() as u64);
            events += 1;
            if let ChatEvent::Error(error) = &event {
                code = Some(error.code);
                // The notification goes out before the stream closes: on Lambda the invocation
                // ends with the stream.
                if error.status().is_server_error() {
                    notify(&self.edge, &self.route, error.code, &self.request_id).await;
                }
            }
            if sender.send(event.to_bytes()).await.is_err() {
                // The client went away: stop reading the model (the provider call is dropped).
                client_gone = true;
                break;
            }
        }
        // Only the route's template path and counts: the events carry the reply.
        tracing::info!(
            request_id = self.request_id,
            method = %self.route.method,
            route = self.route.path,
            status = 200u16,
            code = code.map(ErrorCode::as_str),
            streamed = true,
            events,
            client_gone,
            first_event_ms,
            latency_ms = self.started.elapsed().as_millis() as u64,
            "request"
        );
        // A stream's latency is its first event's (the head left at once); an error event that
        // is the server's counts as a 5xx.
        let status = match code {
            Some(code) => code.status(),
            None => StatusCode::OK,
        };
        let latency = first_event_ms.unwrap_or_else(|| self.started.elapsed().as_millis() as u64);
        self.edge.measure(latency as i64, status);
    }
}
