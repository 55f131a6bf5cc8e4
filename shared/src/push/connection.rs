//! One HTTP/2 connection to an APNs host (h2 over TLS), opened on first use or by
//! [`ApnsConnection::warm`], and opened again when it closed.
//!
//! A connection can die without a word (no FIN, no RST), e.g. while the Lambda container was
//! frozen, and a push sent on it gets no answer: "push state unknown". So before a connection
//! silent for [`ConnectionTimings::check_after_idle`] carries a push, an HTTP/2 PING checks it
//! (as Apple recommends); without a PONG within [`ConnectionTimings::ping`] it is dropped and the
//! push goes on a new one.
//!
//! APNs changes a connection's stream limit while it lives (down to 1 after a rejected push),
//! refuses streams and sends GOAWAY, so a push counts as sent only once its request left on a
//! stream the server allowed: it first waits (within [`ConnectionTimings::stream`]) for an open
//! connection and for one of the streams the server's SETTINGS_MAX_CONCURRENT_STREAMS allows,
//! then for h2 to open that stream (HEADERS written), and only then hands over its body. A push
//! that gets no stream in time, or whose stream APNs refused (`REFUSED_STREAM`) or left above a
//! GOAWAY's last stream id (RFC 9113 §6.8), did not leave: it goes again on a fresh stream or
//! connection while its time lasts, else it is given back unsent. Once handed to h2, a stream
//! runs to its answer in a task of its own, whether or not its caller still waits: a caller that
//! gives up (the dispatcher at its budget) resets nothing, and bursts of resets, which servers
//! take for an attack, never come from us. Opening a connection (TCP, TLS with ALPN `h2`, the
//! HTTP/2 preface) runs in a task of its own, each step under [`ConnectionTimings::connect`];
//! pushes wait for it only within their own time.
//!
//! Our own client rather than a2's: a2 0.10 can be pointed only at Apple's servers, connects only
//! inside a send and gives no access to its HTTP/2 connection (docs/scale.md). Where a push's
//! request stood when it failed decides whether it may have been delivered
//! ([`classify`](super::classify)).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use h2::{RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{Notify, watch};
use tokio::task::AbortHandle;
use tokio::time::{Instant, timeout, timeout_at};

use super::PushError;
use super::classify::{classify_answer, classify_stream_error, not_processed};

/// Where a connection goes.
#[derive(Debug, Clone)]
pub enum ApnsHost {
    /// Apple's host, port 443, TLS.
    Apple(&'static str),
    /// A loopback stand-in over plain TCP (tests).
    Plain(SocketAddr),
    /// A host at this address over TLS, checked against this name (tests).
    TlsAt(SocketAddr, &'static str),
}

impl ApnsHost {
    pub const PRODUCTION: ApnsHost = ApnsHost::Apple("api.push.apple.com");
    pub const SANDBOX: ApnsHost = ApnsHost::Apple("api.development.push.apple.com");

    /// The request URI's scheme and authority.
    pub fn origin(&self) -> String {
        match self {
            ApnsHost::Apple(host) => format!("https://{host}"),
            ApnsHost::Plain(addr) => format!("http://{addr}"),
            ApnsHost::TlsAt(_, host) => format!("https://{host}"),
        }
    }
}

/// How long APNs may take to answer a push once it left, by default
/// ([`ConnectionTimings::request`]); the dispatcher waits this long past its push budget for
/// a push's answer (`dispatch::ANSWER_WAIT`).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a push and the connection's checks may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionTimings {
    /// How long APNs may take to answer a push once it left. The dispatcher holds each push to a
    /// shorter budget; this only bounds a request it has already given up on.
    pub request: Duration,
    /// How long APNs may have been silent on a connection before it is checked with a PING.
    pub check_after_idle: Duration,
    /// How long the PONG may take.
    pub ping: Duration,
    /// Each step of opening a connection: the TCP connect, the TLS handshake, the HTTP/2 preface.
    pub connect: Duration,
    /// How long a push may wait for an open connection and a stream the server allows (and
    /// send again what APNs did not process) before it is given back unsent: under the
    /// dispatcher's push budget (`DISPATCH_PUSH_BUDGET_MS`, 1 s), so it gets the push back
    /// before its budget ends.
    pub stream: Duration,
}

impl Default for ConnectionTimings {
    fn default() -> ConnectionTimings {
        ConnectionTimings {
            request: REQUEST_TIMEOUT,
            check_after_idle: Duration::from_secs(10),
            ping: Duration::from_millis(500),
            connect: Duration::from_secs(1),
            stream: Duration::from_millis(500),
        }
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A connection being opened: its outcome once it is known.
type Opening = watch::Receiver<Option<Result<Arc<Live>, String>>>;

pub struct ApnsConnection {
    host: ApnsHost,
    timings: ConnectionTimings,
    /// The open connection, if any (set by the task that opened it). Never held across an
    /// await.
    live: Arc<Mutex<Option<Arc<Live>>>>,
    /// The connection being opened (by a task of its own), if one is; pushes wait on its
    /// outcome, each within its own time. Never held across an await.
    opening: Mutex<Option<Opening>>,
}

/// An open HTTP/2 connection.
struct Live {
    send: SendRequest<Bytes>,
    /// Taken by the one push that checks the idle connection with a PING.
    pings: tokio::sync::Mutex<h2::PingPong>,
    /// Set when the connection's task ends (closed by either side, or broken).
    closed: Arc<AtomicBool>,
    /// Set when it takes no new stream (GOAWAY, a connection error): the next push opens
    /// another.
    retired: AtomicBool,
    /// When APNs last answered on it (the preface, a response, a PONG).
    heard: Mutex<Instant>,
    /// Our streams open on it; kept at most the server's advertised limit.
    streams: AtomicUsize,
    /// Told when one of our streams ends.
    freed: Notify,
    /// Held by one push at a time from handing its request to h2 until its body is queued
    /// behind its headers: requests leave whole and in stream-id order (see `run_stream`).
    writer: Arc<tokio::sync::Mutex<()>>,
    task: AbortHandle,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One of the streams the server allows, held until the push's answer came (or it failed).
struct StreamSlot(Arc<Live>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::SeqCst);
        self.0.freed.notify_waiters();
    }
}

/// Why no stream was opened for a push.
enum NoStream {
    /// None free within the push's time.
    InTime,
    /// The connection takes no new stream: another is opened.
    Retired,
}

impl Live {
    fn usable(&self) -> bool {
        !self.closed.load(Ordering::SeqCst) && !self.retired.load(Ordering::SeqCst)
    }

    fn heard_now(&self) {
        *self.heard.lock().unwrap() = Instant::now();
    }

    /// Whether the connection is alive: APNs was heard within `check_after_idle`, or answers a
    /// PING within `ping` (one push sends it; others wait for its outcome).
    async fn answers(&self, timings: &ConnectionTimings) -> bool {
        let fresh = || self.heard.lock().unwrap().elapsed() < timings.check_after_idle;
        if fresh() {
            return true;
        }
        let mut pings = self.pings.lock().await;
        if fresh() {
            return true;
        }
        match timeout(timings.ping, pings.ping(h2::Ping::opaque())).await {
            Ok(Ok(_)) => {
                self.heard_now();
                true
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "APNs connection failed its PING: a new one is opened");
                false
            }
            Err(_) => {
                tracing::warn!(
                    ping_ms = timings.ping.as_millis() as u64,
                    "APNs connection did not answer a PING in time: a new one is opened"
                );
                false
            }
        }
    }

    /// One of the streams the server's SETTINGS_MAX_CONCURRENT_STREAMS allows now, waited for
    /// until `deadline`. (h2 would queue a request over the limit and send it later: ours wait
    /// here instead, where giving up means it surely did not leave.)
    async fn stream_slot(self: &Arc<Self>, deadline: Instant) -> Result<StreamSlot, NoStream> {
        loop {
            if !self.usable() {
                return Err(NoStream::Retired);
            }
            let freed = self.freed.notified();
            let limit = self.send.current_max_send_streams();
            let open = self.streams.load(Ordering::SeqCst);
            if open < limit {
                if self
                    .streams
                    .compare_exchange(open, open + 1, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    return Ok(StreamSlot(self.clone()));
                }
                continue;
            }
            // A stream ends (told; the server raises its limit after a success, whose stream
            // ends too), or, seen on the next look, the limit rose otherwise.
            let next_look = (Instant::now() + Duration::from_millis(20)).min(deadline);
            let _ = timeout_at(next_look, freed).await;
            if Instant::now() >= deadline {
                return Err(NoStream::InTime);
            }
        }
    }

    /// Opens a stream for `head` on the stream `slot` holds: hands the request to h2 and waits,
    /// up to `body_wait`, until h2 has opened the stream and can take the `body_len` bytes of its
    /// body. That wait is not cut at the push's deadline: a stream h2 holds would be reset if
    /// dropped, and servers take bursts of resets for an attack (h2's own server closes the
    /// connection after 20), taking the pushes in flight with it.
    async fn open_stream(
        &self,
        head: &http::request::Parts,
        (body_len, body_wait): (usize, Duration),
        writing: &mut Option<tokio::sync::OwnedMutexGuard<()>>,
    ) -> Result<(ResponseFuture, SendStream<Bytes>), Answer> {
        let mut request = http::Request::new(());
        *request.method_mut() = head.method.clone();
        *request.uri_mut() = head.uri.clone();
        *request.headers_mut() = head.headers.clone();
        let mut send = self.send.clone();
        let (response, mut stream) = send.send_request(request, false).map_err(|e| {
            // The connection takes no new stream (GOAWAY, closed): nothing was sent.
            self.retired.store(true, Ordering::SeqCst);
            tracing::debug!(error = %e, "APNs connection takes no new stream");
            Answer::Retired
        })?;
        // h2 assigns capacity to a stream only once it opened it (within the limit, HEADERS
        // written), so capacity here means the request's head left on an allowed stream. The
        // whole body's is waited for, so it leaves in one DATA frame.
        let body_len = body_len.max(1);
        stream.reserve_capacity(body_len);
        let capacity = std::future::poll_fn(|cx| {
            loop {
                match std::task::ready!(stream.poll_capacity(cx)) {
                    Some(Ok(capacity)) if capacity < body_len => continue,
                    other => return std::task::Poll::Ready(other),
                }
            }
        });
        tokio::pin!(capacity);
        let started = Instant::now();
        // A stream h2 opens at once leaves its body behind its headers with the writer held. One
        // h2 holds back (the server's limit fell after its slot was counted) lets the writer go
        // after WRITER_HOLD, so the connection's other pushes do not wait on it; its body then
        // leaves whenever h2 opens it.
        let opened = match timeout(WRITER_HOLD, &mut capacity).await {
            Ok(opened) => Ok(opened),
            Err(_) => {
                drop(writing.take());
                timeout_at(started + body_wait, &mut capacity).await
            }
        };
        match opened {
            Ok(Some(Ok(_))) => Ok((response, stream)),
            // It ended before its body left (reset, GOAWAY, the connection closed), so APNs
            // could not process it; the response says how.
            Ok(_) => Err(Answer::NotProcessed(match response.await {
                Err(e) if not_processed(&e).is_some() => self.not_processed(&e),
                Err(e) => not_sent(format!(
                    "the push's HTTP/2 stream ended before its body left: {e}"
                )),
                Ok(_) => not_sent("APNs answered before the push's body left".into()),
            })),
            // Rare: dropped, its body never left (h2 resets the stream).
            Err(_) => Err(Answer::NotProcessed(not_sent(format!(
                "the push's body could not leave within {} ms",
                body_wait.as_millis()
            )))),
        }
    }

    /// A stream error that says APNs did not process the request: the push's class, and the
    /// connection retired if it is going away.
    fn not_processed(&self, error: &h2::Error) -> PushError {
        if error.is_go_away() {
            self.retired.store(true, Ordering::SeqCst);
        }
        classify_stream_error(error)
    }
}

/// A push that surely did not leave.
fn not_sent(reason: String) -> PushError {
    PushError::Retryable {
        status: None,
        reason,
    }
}

/// How long a push holds its connection's writer waiting for h2 to open its stream (at once,
/// unless the server's limit fell under it) before it lets the next push go.
const WRITER_HOLD: Duration = Duration::from_millis(20);

/// APNs error bodies are `{"reason": "..."}`: more than this is not read.
pub const MAX_ERROR_BODY: usize = 4096;

impl ApnsConnection {
    pub fn new(host: ApnsHost, timings: ConnectionTimings) -> ApnsConnection {
        ApnsConnection {
            host,
            timings,
            live: Arc::new(Mutex::new(None)),
            opening: Mutex::new(None),
        }
    }

    pub fn origin(&self) -> String {
        self.host.origin()
    }

    /// Streams the server allows now beyond those open, if the connection is open.
    pub fn headroom(&self) -> Option<usize> {
        let live = self.live.lock().unwrap().clone()?;
        let open = live.streams.load(Ordering::SeqCst);
        live.usable()
            .then(|| live.send.current_max_send_streams().saturating_sub(open))
    }

    /// Opens the connection if it is not open (a failure is logged; the next push tries again).
    /// Returns within the steps' timeouts (`connect` each, and a PING).
    pub async fn warm(&self) {
        let t = &self.timings;
        let deadline = Instant::now() + t.connect * 3 + t.ping;
        if let Err(error) = self.live(deadline).await {
            tracing::warn!(%error, "could not open an APNs connection ahead of a push");
        }
    }

    /// Sends one request (its headers and body) and reads APNs's answer. Not handed to h2 by
    /// the stream wait (`ConnectionTimings::stream`) or `leave_by`, the earlier: given back
    /// unsent; nor given a free stream (and the writer) by `stream_by`, if sooner: given back
    /// unsent too (the pool then tries another connection).
    pub async fn send(
        &self,
        request: http::Request<()>,
        body: Bytes,
        (leave_by, stream_by): (Option<Instant>, Option<Instant>),
    ) -> Result<(), PushError> {
        let (head, ()) = request.into_parts();
        let head = Arc::new(head);
        let waited = Instant::now() + self.timings.stream;
        let give_up = leave_by.map_or(waited, |by| by.min(waited));
        let slot_by = stream_by.map_or(give_up, |by| by.min(give_up));
        let ms = give_up
            .saturating_duration_since(Instant::now())
            .as_millis();
        let mut refused = None;
        loop {
            if Instant::now() >= give_up {
                return Err(refused.unwrap_or_else(|| {
                    not_sent(format!("no HTTP/2 stream to APNs within {ms} ms"))
                }));
            }
            let live = self.live(give_up).await?;
            // Nothing of the push is with h2 while it waits here: giving up leaves nothing.
            let slot = match live.stream_slot(slot_by).await {
                Ok(slot) => slot,
                Err(NoStream::Retired) => {
                    self.retire(&live);
                    continue;
                }
                Err(NoStream::InTime) => {
                    return Err(refused.unwrap_or_else(|| {
                        not_sent(format!(
                            "no HTTP/2 stream free on the APNs connection within {ms} ms"
                        ))
                    }));
                }
            };
            // The connection's writer, waited for within the push's time: nothing of the push
            // is with h2 yet, so giving up here leaves nothing.
            let Ok(writing) = timeout_at(slot_by, live.writer.clone().lock_owned()).await else {
                return Err(refused.unwrap_or_else(|| {
                    not_sent(format!(
                        "the APNs connection's writer stayed busy for {ms} ms"
                    ))
                }));
            };
            // From here the stream is h2's: it runs to its end in a task of its own, so a
            // caller that gives up on the push (the dispatcher at its budget) does not reset it.
            // A reset would not unsend it, and servers take bursts of resets for an attack
            // (h2's own server sends GOAWAY after 20), dropping every push in flight with it.
            let stream = tokio::spawn(run_stream(
                (slot, writing),
                head.clone(),
                body.clone(),
                self.timings,
            ));
            let outcome = stream.await.unwrap_or_else(|e| {
                Err(Answer::Failed(PushError::MaybeDelivered {
                    reason: format!("the push's HTTP/2 stream task failed: {e}"),
                }))
            });
            match outcome {
                Ok(()) => return Ok(()),
                // The connection takes no new stream (GOAWAY, closed): nothing was sent.
                Err(Answer::Retired) => self.retire(&live),
                // Refused, above a GOAWAY's last stream id, or its body never left: not
                // processed, goes again.
                Err(Answer::NotProcessed(error)) => {
                    if !live.usable() {
                        self.retire(&live);
                    }
                    refused = Some(error);
                }
                Err(Answer::Failed(error)) => return Err(error),
            }
        }
    }
}

/// A push's stream from the moment it is handed to h2 to its answer, on the stream `slot`
/// holds, with the connection's writer held until its body is queued.
///
/// Requests leave whole and in stream-id order: a server that names, in its GOAWAY, the last
/// stream whose request it read whole (and reads nothing more) has then read every stream below
/// it whole, and none above it. Were bodies queued in whatever order their tasks woke, a stream
/// below the last stream id could be left unread (never processed, yet "may have been" by RFC
/// 9113 §6.8: recorded push state unknown) and one above it read whole and answered, while h2
/// reports it not processed: sent again, the phone rings twice. h2 sends queued frames round
/// robin over the streams in the order they were queued, so queuing each body before the next
/// request is handed over is enough.
async fn run_stream(
    (slot, writing): (StreamSlot, tokio::sync::OwnedMutexGuard<()>),
    head: Arc<http::request::Parts>,
    body: Bytes,
    timings: ConnectionTimings,
) -> Result<(), Answer> {
    let live = slot.0.clone();
    let mut writing = Some(writing);
    let (response, mut stream) = live
        .open_stream(&head, (body.len(), timings.request), &mut writing)
        .await?;
    // From here the push may reach APNs.
    let _ = stream.send_data(body, true);
    drop(writing);
    let answer = timeout(timings.request, answer(&live, response)).await;
    drop(slot);
    answer.unwrap_or_else(|_| {
        Err(Answer::Failed(PushError::MaybeDelivered {
            reason: format!(
                "no answer from APNs within {} s",
                timings.request.as_secs_f64()
            ),
        }))
    })
}

/// APNs's answer on a stream the push's body left on.
async fn answer(live: &Live, response: ResponseFuture) -> Result<(), Answer> {
    let response = response.await.map_err(|e| match not_processed(&e) {
        Some(_) => Answer::NotProcessed(live.not_processed(&e)),
        None => Answer::Failed(classify_stream_error(&e)),
    })?;
    live.heard_now();
    let status = response.status().as_u16();
    if status == 200 {
        return Ok(());
    }
    let bytes = read_capped(response.into_body(), status).await?;
    classify_answer(status, &bytes).map_err(Answer::Failed)
}

impl ApnsConnection {
    /// The open connection, checked with a PING if it was idle; else a new one, opened by a
    /// task of its own. Waits until `deadline` at most: an error means nothing was sent.
    async fn live(&self, deadline: Instant) -> Result<Arc<Live>, PushError> {
        let current = self.live.lock().unwrap().clone();
        if let Some(live) = current {
            if live.usable() {
                match timeout_at(deadline, live.answers(&self.timings)).await {
                    Ok(true) => return Ok(live),
                    Ok(false) => {}
                    Err(_) => return Err(self.not_ready()),
                }
            }
            self.retire(&live);
        }
        let mut opening = self.opening();
        match timeout_at(deadline, opening.wait_for(Option::is_some)).await {
            Ok(Ok(outcome)) => match outcome.as_ref().expect("waited for an outcome") {
                Ok(live) => Ok(live.clone()),
                Err(reason) => Err(not_sent(format!("could not connect to APNs: {reason}"))),
            },
            Ok(Err(_)) => Err(not_sent(
                "could not connect to APNs: the attempt ended".into(),
            )),
            Err(_) => Err(self.not_ready()),
        }
    }

    fn not_ready(&self) -> PushError {
        not_sent(format!(
            "no APNs connection ready within {} ms",
            self.timings.stream.as_millis()
        ))
    }

    /// Drops `live` as the open connection (if it still is).
    fn retire(&self, live: &Arc<Live>) {
        live.retired.store(true, Ordering::SeqCst);
        let mut current = self.live.lock().unwrap();
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, live)) {
            *current = None;
        }
    }

    /// The connection being opened: the one under way, or a new attempt started now.
    fn opening(&self) -> Opening {
        let mut opening = self.opening.lock().unwrap();
        if let Some(under_way) = opening.as_ref()
            && under_way.borrow().is_none()
        {
            return under_way.clone();
        }
        let (outcome, receiver) = watch::channel(None);
        *opening = Some(receiver.clone());
        let (host, timings, open) = (self.host.clone(), self.timings, self.live.clone());
        tokio::spawn(async move {
            let result = connect(&host, &timings).await.map(Arc::new);
            if let Ok(live) = &result {
                *open.lock().unwrap() = Some(live.clone());
            }
            outcome.send_replace(Some(result));
        });
        receiver
    }
}

/// How a push's stream ended, when not in a success.
enum Answer {
    /// The connection took no new stream (GOAWAY, closed): nothing was sent.
    Retired,
    /// APNs did not process the request (refused, above a GOAWAY's last stream id), or its
    /// body never left.
    NotProcessed(PushError),
    Failed(PushError),
}

/// An error answer's body, at most [`MAX_ERROR_BODY`] bytes of it.
async fn read_capped(mut body: RecvStream, status: u16) -> Result<Vec<u8>, Answer> {
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| {
            Answer::Failed(not_sent(format!(
                "APNs answered {status}, its body was cut off: {e}"
            )))
        })?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if bytes.len() + chunk.len() > MAX_ERROR_BODY {
            // Not APNs's `{"reason": ...}`: classified by its status alone.
            return Ok(Vec::new());
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Opens a connection to `host`: TCP, TLS (ALPN `h2` required) and the HTTP/2 preface, each
/// within `timings.connect`. The preface is done once APNs answered a PING: its SETTINGS
/// (its stream limit among them) come before that answer, so no push goes out before the
/// limit is known, and a server that never speaks HTTP/2 is given up on here.
async fn connect(host: &ApnsHost, timings: &ConnectionTimings) -> Result<Live, String> {
    let limit = timings.connect;
    let step = |what: &'static str| {
        move |_| format!("{what} did not complete within {} ms", limit.as_millis())
    };
    let tcp = |addr: SocketAddr| async move {
        let tcp = timeout(limit, TcpStream::connect(addr))
            .await
            .map_err(step("the TCP connect"))?
            .map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        Ok::<_, String>(tcp)
    };
    let io: Box<dyn Io> = match host {
        ApnsHost::Apple(name) => {
            let addr = timeout(limit, tokio::net::lookup_host((*name, 443)))
                .await
                .map_err(step("the DNS lookup"))?
                .map_err(|e| e.to_string())?
                .next()
                .ok_or("the DNS lookup found no address")?;
            Box::new(tls(tcp(addr).await?, name, limit).await?)
        }
        ApnsHost::TlsAt(addr, name) => Box::new(tls(tcp(*addr).await?, name, limit).await?),
        ApnsHost::Plain(addr) => Box::new(tcp(*addr).await?),
    };
    let (send, mut connection) = timeout(limit, h2::client::handshake(io))
        .await
        .map_err(step("the HTTP/2 handshake"))?
        .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    let mut pings = connection.ping_pong().expect("taken once, here");
    let closed = Arc::new(AtomicBool::new(false));
    let ended = closed.clone();
    let task = tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "APNs connection ended");
        }
        ended.store(true, Ordering::SeqCst);
    });
    let preface = timeout(limit, pings.ping(h2::Ping::opaque())).await;
    let preface = match preface {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("HTTP/2 preface: {e}")),
        Err(elapsed) => Err(step("APNs's HTTP/2 preface")(elapsed)),
    };
    if let Err(reason) = preface {
        task.abort();
        return Err(reason);
    }
    Ok(Live {
        send,
        pings: tokio::sync::Mutex::new(pings),
        closed,
        retired: AtomicBool::new(false),
        heard: Mutex::new(Instant::now()),
        streams: AtomicUsize::new(0),
        freed: Notify::new(),
        writer: Arc::new(tokio::sync::Mutex::new(())),
        task: task.abort_handle(),
    })
}

/// TLS over `tcp` to `name`, within `limit`; the server must agree to HTTP/2 (ALPN `h2`).
async fn tls(
    tcp: TcpStream,
    name: &str,
    limit: Duration,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let name =
        rustls::pki_types::ServerName::try_from(name.to_owned()).map_err(|e| e.to_string())?;
    let tls = timeout(limit, tls_connector().connect(name, tcp))
        .await
        .map_err(|_| {
            format!(
                "the TLS handshake did not complete within {} ms",
                limit.as_millis()
            )
        })?
        .map_err(|e| format!("TLS: {e}"))?;
    if tls.get_ref().1.alpn_protocol() != Some(b"h2".as_slice()) {
        return Err("TLS: the server did not agree to HTTP/2 (ALPN h2)".into());
    }
    Ok(tls)
}

/// TLS for APNs (the webpki roots, ALPN `h2`), built once per process.
fn tls_connector() -> tokio_rustls::TlsConnector {
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let mut config = crate::platform::https::tls_config();
        config.alpn_protocols = vec![b"h2".to_vec()];
        Arc::new(config)
    });
    tokio_rustls::TlsConnector::from(config.clone())
}
