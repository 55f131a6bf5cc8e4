//! A strict stand-in APNs: a loopback HTTP/2 server (plain TCP) that answers as Apple's servers
//! do when things go wrong, each behaviour from a public source (docs/benchmarks.md, "The strict
//! APNs stand-in"):
//! - SETTINGS_MAX_CONCURRENT_STREAMS starts at [`StrictSettings::max_streams`] (1,000), drops to 1
//!   on a connection right after a notification on it is rejected (any non-200) and comes back
//!   after its next success, each change advertised with a new SETTINGS frame right after the
//!   answer that caused it;
//! - a stream that arrives while the connection's limit is reached is refused with `RST_STREAM`
//!   (`REFUSED_STREAM`), and a client that keeps exceeding it once it acknowledged it gets GOAWAY
//!   (`ENHANCE_YOUR_CALM`, "Maximum active streams violated for this endpoint"); streams it
//!   opened before the SETTINGS reached it are refused but not held against it;
//! - on demand, a graceful GOAWAY naming the stream of the n-th request read whole (in the byte
//!   stream's order), after which the connection reads nothing more, answers the requests it
//!   read whole (above that stream too) and closes [`StrictSettings::close_after_go_away`]
//!   later: the requests it had not read whole are not processed;
//! - 403 `ExpiredProviderToken` for a provider token issued more than an hour ago, 429
//!   `TooManyProviderTokenUpdates` for a token that replaces another on a connection within 20
//!   minutes;
//! - servers that never accept a TCP connection, or accept and never speak (to a TLS client: a
//!   handshake that stalls);
//! - answers after a latency with a tail.
//!
//! It records every stream it saw and what became of it, so a test tells the pushes APNs
//! processed from those it never did.

mod frames;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use koe::platform::clock::{Clock, SystemClock};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use frames::{Framed, Injector};

/// How the stand-in answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StrictSettings {
    /// SETTINGS_MAX_CONCURRENT_STREAMS on connect and after a success.
    pub max_streams: u32,
    /// Each answer's delay.
    pub latency: Duration,
    /// The share of answers (0..=1) that take `tail` more.
    pub tail_share: f64,
    pub tail: Duration,
    /// Streams a connection may open past a limit it acknowledged before it is sent GOAWAY.
    pub refusals_before_goaway: usize,
    /// Seeds the tail draws.
    pub seed: u64,
    /// After a graceful GOAWAY the connection reads nothing more from the client (once the
    /// request of its last stream is in), still answers the streams it took, and closes the
    /// socket this long after the GOAWAY, whatever is still open on it.
    pub close_after_go_away: Duration,
}

impl StrictSettings {
    /// As the APNs server written outside the project that issue 58 ran against: every answer
    /// 150 ms after its stream ends, `ENHANCE_YOUR_CALM` at the first stream past an
    /// acknowledged limit, the socket closed 1.15 s after a graceful GOAWAY (with the limit
    /// changes and the GOAWAY's reading that every stand-in has; docs/benchmarks.md).
    pub fn outside() -> StrictSettings {
        StrictSettings {
            latency: Duration::from_millis(150),
            refusals_before_goaway: 0,
            close_after_go_away: Duration::from_millis(1150),
            ..StrictSettings::default()
        }
    }

    /// A crowded second's answers, for the tests of it: 20 ms, with 200 ms more on 5 %.
    pub fn crowded() -> StrictSettings {
        StrictSettings {
            latency: Duration::from_millis(20),
            tail_share: 0.05,
            tail: Duration::from_millis(200),
            ..StrictSettings::default()
        }
    }
}

impl Default for StrictSettings {
    fn default() -> StrictSettings {
        StrictSettings {
            max_streams: 1000,
            latency: Duration::from_millis(5),
            tail_share: 0.0,
            tail: Duration::ZERO,
            refusals_before_goaway: 10,
            seed: 48,
            close_after_go_away: Duration::from_millis(1150),
        }
    }
}

/// What became of one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Answered 200: the push is delivered.
    Accepted,
    /// Answered with this status (410 `Unregistered`, 403 `ExpiredProviderToken`, 429
    /// `TooManyProviderTokenUpdates`): processed and rejected.
    Rejected(u16),
    /// Reset with `REFUSED_STREAM` before it was read: not processed.
    Refused,
    /// Above the last stream id of a GOAWAY: not processed.
    AboveGoAway,
    /// Taken, at or below a GOAWAY's last stream id, but its request was never read whole
    /// before the connection closed: not processed.
    Unread,
}

impl Fate {
    /// Whether APNs processed the request (and could have delivered it).
    pub fn processed(self) -> bool {
        matches!(self, Fate::Accepted | Fate::Rejected(_))
    }
}

/// One stream as the stand-in saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub connection: usize,
    pub stream_id: u32,
    /// The payload's `callId` (empty for a stream not processed: its request is not read).
    pub call_id: String,
    /// The request's head (empty for a stream not processed).
    pub head: Head,
    pub fate: Fate,
    /// When it arrived (its request read, for a processed one), on the stand-in's clock.
    pub at: chrono::DateTime<chrono::Utc>,
}

/// What a processed request's head said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Head {
    /// The device token, from the path `/3/device/<token>`.
    pub device_token: String,
    pub topic: String,
    pub push_type: String,
    /// The `authorization` header: `bearer <provider token>`.
    pub authorization: String,
}

/// A running stand-in; it stops with the test's runtime.
pub struct StrictApns {
    pub addr: std::net::SocketAddr,
    shared: Arc<Shared>,
}

struct Shared {
    settings: StrictSettings,
    clock: Arc<dyn Clock>,
    connections: AtomicUsize,
    seen: Mutex<Vec<Seen>>,
    dead_tokens: Mutex<HashSet<String>>,
    /// Seconds added to the real time to make the stand-in's clock (a skewed or later APNs).
    clock_ahead: AtomicU64,
    /// Streams still to accept before the graceful GOAWAY (`u64::MAX`: none asked for).
    go_away_in: Arc<AtomicU64>,
    go_aways: AtomicUsize,
    /// How connections ended in error, as h2's server saw it.
    ended: Mutex<Vec<String>>,
    /// Streams still to refuse whatever the limit (`REFUSED_STREAM`).
    refuse_next: AtomicUsize,
    /// Streams the client reset (`RST_STREAM`) before they were answered.
    client_resets: AtomicUsize,
    rng: Mutex<fastrand::Rng>,
}

impl StrictApns {
    /// Serves on a loopback port with `settings`, on the system clock.
    pub async fn start(settings: StrictSettings) -> StrictApns {
        StrictApns::start_with_clock(settings, Arc::new(SystemClock)).await
    }

    /// Serves with `settings`, judging provider tokens' ages on `clock`.
    pub async fn start_with_clock(settings: StrictSettings, clock: Arc<dyn Clock>) -> StrictApns {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            settings,
            clock,
            connections: AtomicUsize::new(0),
            seen: Mutex::new(Vec::new()),
            dead_tokens: Mutex::new(HashSet::new()),
            clock_ahead: AtomicU64::new(0),
            go_away_in: Arc::new(AtomicU64::new(u64::MAX)),
            go_aways: AtomicUsize::new(0),
            ended: Mutex::new(Vec::new()),
            refuse_next: AtomicUsize::new(0),
            client_resets: AtomicUsize::new(0),
            rng: Mutex::new(fastrand::Rng::with_seed(settings.seed)),
        });
        let serving = shared.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let _ = socket.set_nodelay(true);
                let id = serving.connections.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::spawn(serve(socket, id, serving.clone()));
            }
        });
        StrictApns { addr, shared }
    }

    /// Pushes to `token` are answered 410 `Unregistered` (a dead token).
    pub fn unregister(&self, token: &str) {
        self.shared
            .dead_tokens
            .lock()
            .unwrap()
            .insert(token.to_owned());
    }

    /// The stand-in's clock runs `ahead` of real time (provider tokens look that much older).
    pub fn set_clock_ahead(&self, ahead: Duration) {
        self.shared
            .clock_ahead
            .store(ahead.as_secs(), Ordering::SeqCst);
    }

    /// The connection that reads the `n`-th request whole from now (1: the next; counted in
    /// the byte stream's order, over every connection) sends a graceful GOAWAY (`NO_ERROR`)
    /// whose last stream id is that request's, reads nothing more, answers the requests it
    /// read whole and closes `close_after_go_away` later: requests it had not read whole are
    /// not processed.
    pub fn go_away_after(&self, n: u64) {
        self.shared.go_away_in.store(n.max(1), Ordering::SeqCst);
    }

    /// The next `n` streams are refused (`REFUSED_STREAM`) whatever the limit, as APNs refuses
    /// streams it will not process.
    pub fn refuse_next(&self, n: usize) {
        self.shared.refuse_next.store(n, Ordering::SeqCst);
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// GOAWAY frames sent so far (graceful or for exceeding the limit).
    pub fn go_aways(&self) -> usize {
        self.shared.go_aways.load(Ordering::SeqCst)
    }

    /// Connections that ended in an error, and the error as h2's server saw it.
    pub fn ended_in_error(&self) -> Vec<String> {
        self.shared.ended.lock().unwrap().clone()
    }

    /// Every stream seen so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    /// How many times `call_id`'s push was processed (answered 200 or rejected).
    pub fn processed(&self, call_id: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.call_id == call_id && s.fate.processed())
            .count()
    }

    /// Streams the client reset before they were answered, so far.
    pub fn client_resets(&self) -> usize {
        self.shared.client_resets.load(Ordering::SeqCst)
    }

    /// Streams refused with `REFUSED_STREAM` so far.
    pub fn refused(&self) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.fate == Fate::Refused)
            .count()
    }
}

/// A server that listens and never accepts, its accept queue full: a client's TCP connect never
/// completes (its SYNs are dropped, as when a host is unreachable). Stops with the runtime.
pub async fn never_accepting() -> std::net::SocketAddr {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
    let addr = socket.local_addr().expect("local addr");
    let listener = socket.listen(1).expect("listen");
    // Fills the accept queue (a backlog of 1 holds two), so further SYNs are dropped.
    let mut fillers = Vec::new();
    for _ in 0..2 {
        fillers.push(TcpStream::connect(addr).await.expect("fill the queue"));
    }
    tokio::spawn(async move {
        let _held = (listener, fillers);
        std::future::pending::<()>().await;
    });
    addr
}

/// A server that accepts TCP connections, reads what comes and never writes a byte: no HTTP/2
/// preface, and to a TLS client a handshake that stalls after its ClientHello. Stops with the
/// runtime.
pub async fn never_speaking() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut sink = tokio::io::sink();
                let _ = tokio::io::copy(&mut socket, &mut sink).await;
                std::future::pending::<()>().await;
            });
        }
    });
    addr
}

/// One connection's state.
struct Connection {
    id: usize,
    injector: Arc<Mutex<Injector>>,
    inner: Mutex<ConnectionState>,
    /// The provider token in use on it and when (the stand-in's clock) it replaced the one
    /// before. Kept per connection: each process of a fleet (each Lambda container) signs its
    /// own, as every APNs client library does.
    token: Mutex<Option<(String, i64)>>,
    /// Told when a graceful GOAWAY sets the time the socket closes.
    closing: tokio::sync::Notify,
}

struct ConnectionState {
    /// The limit advertised now.
    limit: u32,
    /// Streams accepted and not yet answered.
    active: u32,
    refusals: usize,
    /// When the socket is closed (a graceful GOAWAY's time plus `close_after_go_away`).
    close_at: Option<tokio::time::Instant>,
    /// Set once the socket is closed.
    closed: bool,
}

async fn serve(socket: TcpStream, id: usize, shared: Arc<Shared>) {
    let injector = Arc::new(Mutex::new(Injector::new(
        shared.settings.max_streams,
        shared.go_away_in.clone(),
    )));
    let io = Framed::new(socket, injector.clone());
    let Ok(mut h2) = h2::server::Builder::new()
        .max_concurrent_streams(shared.settings.max_streams)
        .handshake::<_, Bytes>(io)
        .await
    else {
        return;
    };
    let connection = Arc::new(Connection {
        id,
        injector,
        inner: Mutex::new(ConnectionState {
            limit: shared.settings.max_streams,
            active: 0,
            refusals: 0,
            close_at: None,
            closed: false,
        }),
        token: Mutex::new(None),
        closing: tokio::sync::Notify::new(),
    });
    // Streams above a GOAWAY's last stream id: held open, never answered (not processed).
    let mut held = Vec::new();
    loop {
        let closed = async {
            loop {
                let close_at = connection.inner.lock().unwrap().close_at;
                match close_at {
                    Some(at) => return tokio::time::sleep_until(at).await,
                    None => connection.closing.notified().await,
                }
            }
        };
        let accepted = tokio::select! {
            accepted = h2.accept() => accepted,
            // The socket closes, whatever is still open on it.
            () = closed => break,
        };
        let (request, mut respond) = match accepted {
            Some(Ok(accepted)) => accepted,
            Some(Err(e)) => {
                shared
                    .ended
                    .lock()
                    .unwrap()
                    .push(format!("connection {id}: {e:?}"));
                break;
            }
            None => break,
        };
        let stream_id = u32::from(respond.stream_id());
        match connection.admit(stream_id, &shared) {
            // Recorded when the GOAWAY went ([`Connection::take`]).
            Admit::Unread => held.push(respond),
            Admit::Refuse { go_away } => {
                connection.injector.lock().unwrap().refused(stream_id);
                shared.record(&connection, stream_id, Fate::Refused);
                // Its request may have been read whole (in the same read as its HEADERS) and
                // named by the GOAWAY before h2 handed it over: the GOAWAY stands, and its
                // close is set here, as it is for a named stream that is answered.
                connection.take(stream_id, &shared);
                respond.send_reset(h2::Reason::REFUSED_STREAM);
                if go_away {
                    shared.go_aways.fetch_add(1, Ordering::SeqCst);
                    h2.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                    // Lets h2 write the GOAWAY, then the connection closes.
                    let _ = h2.accept().await;
                    return;
                }
            }
            Admit::Process => {
                tokio::spawn(answer(
                    request,
                    respond,
                    stream_id,
                    connection.clone(),
                    shared.clone(),
                ));
            }
        }
    }
    connection.inner.lock().unwrap().closed = true;
    drop(held);
}

/// What becomes of a stream as it arrives.
enum Admit {
    /// Not read whole when the GOAWAY went, and never will be: not processed.
    Unread,
    /// Refused (`REFUSED_STREAM`); `go_away`: the client keeps exceeding the limit.
    Refuse {
        go_away: bool,
    },
    Process,
}

impl Connection {
    fn admit(&self, stream_id: u32, shared: &Shared) -> Admit {
        let mut state = self.inner.lock().unwrap();
        let known = self.injector.lock().unwrap().limit_known_at_open(stream_id);
        if self.injector.lock().unwrap().unread.contains(&stream_id) {
            return Admit::Unread;
        }
        let refuse_anyway = shared
            .refuse_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if refuse_anyway {
            return Admit::Refuse { go_away: false };
        }
        if state.active >= state.limit {
            // Only a client that opened the stream past a limit it had acknowledged exceeds it:
            // streams it opened before a lower limit's SETTINGS reached it are refused, not held
            // against it (RFC 9113 §6.5.3), however late the server reads them.
            if known.is_some_and(|limit| state.active >= limit) {
                state.refusals += 1;
            }
            let go_away = state.refusals > shared.settings.refusals_before_goaway;
            return Admit::Refuse { go_away };
        }
        state.active += 1;
        Admit::Process
    }

    /// A stream's request is in whole (its body read) or it was refused: if its END_STREAM made the graceful
    /// GOAWAY (`frames::Injector::taken`, the `go_away_after`-th request read whole in all, in
    /// the byte stream's order), the socket is closed `close_after_go_away` from now, and the
    /// streams the connection had not read whole are recorded: above the last stream id, or
    /// (a client that sent requests out of stream-id order) below it, unread. Streams it had
    /// read whole are still answered, above the last stream id too: the server names the
    /// request that made it go away, not the highest stream it took.
    fn take(&self, stream_id: u32, shared: &Shared) {
        let unread = {
            let injector = self.injector.lock().unwrap();
            if injector.taken_last != Some(stream_id) {
                return;
            }
            injector.unread.clone()
        };
        self.inner.lock().unwrap().close_at =
            Some(tokio::time::Instant::now() + shared.settings.close_after_go_away);
        shared.go_aways.fetch_add(1, Ordering::SeqCst);
        for unread in unread {
            let fate = if unread > stream_id {
                Fate::AboveGoAway
            } else {
                Fate::Unread
            };
            shared.record(self, unread, fate);
        }
        self.closing.notify_one();
    }
}

impl Shared {
    fn record(&self, connection: &Connection, stream_id: u32, fate: Fate) {
        let (call_id, head, at) = (String::new(), Head::default(), self.clock.now());
        self.record_request(connection, stream_id, (call_id, head, at), fate);
    }

    /// One stream: its call id, head and arrival, and what became of it.
    fn record_request(
        &self,
        connection: &Connection,
        stream_id: u32,
        (call_id, head, at): (String, Head, chrono::DateTime<chrono::Utc>),
        fate: Fate,
    ) {
        self.seen.lock().unwrap().push(Seen {
            connection: connection.id,
            stream_id,
            call_id,
            head,
            fate,
            at,
        });
    }

    /// Seconds since the epoch on the stand-in's clock.
    fn now(&self) -> i64 {
        self.clock.now().timestamp() + self.clock_ahead.load(Ordering::SeqCst) as i64
    }

    /// APNs's provider-token rules: a token that replaces another on `connection` within 20
    /// minutes is 429 `TooManyProviderTokenUpdates` (and not adopted), one issued more than an
    /// hour ago 403 `ExpiredProviderToken`.
    fn check_token(&self, connection: &Connection, bearer: &str) -> Option<(u16, &'static str)> {
        let now = self.now();
        let jwt = bearer.strip_prefix("bearer ").unwrap_or(bearer);
        let issued_at = jwt
            .split('.')
            .nth(1)
            .and_then(|claims| URL_SAFE_NO_PAD.decode(claims).ok())
            .and_then(|claims| serde_json::from_slice::<serde_json::Value>(&claims).ok())
            .and_then(|claims| claims["iat"].as_i64());
        let Some(issued_at) = issued_at else {
            return Some((403, "InvalidProviderToken"));
        };
        {
            let mut token = connection.token.lock().unwrap();
            match token.as_ref() {
                Some((current, _)) if current == jwt => {}
                Some((_, since)) if now - since < 20 * 60 => {
                    return Some((429, "TooManyProviderTokenUpdates"));
                }
                _ => *token = Some((jwt.to_owned(), now)),
            }
        }
        (now - issued_at > 60 * 60).then_some((403, "ExpiredProviderToken"))
    }

    fn delay(&self) -> Duration {
        let settings = &self.settings;
        let tail = self.rng.lock().unwrap().f64() < settings.tail_share;
        settings.latency + if tail { settings.tail } else { Duration::ZERO }
    }
}

async fn answer(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    stream_id: u32,
    connection: Arc<Connection>,
    shared: Arc<Shared>,
) {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let head = Head {
        device_token: request
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned(),
        topic: header("apns-topic"),
        push_type: header("apns-push-type"),
        authorization: header("authorization"),
    };
    let (token, bearer) = (head.device_token.clone(), head.authorization.clone());
    // The stream counts against the limit until it is answered or the client resets it.
    let mut active = Some(Active(connection.clone()));
    let mut body = request.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let Ok(chunk) = chunk else {
            if !connection.inner.lock().unwrap().closed {
                shared.client_resets.fetch_add(1, Ordering::SeqCst);
            }
            return;
        };
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    connection.take(stream_id, &shared);
    let call_id = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v["callId"].as_str().map(str::to_owned))
        .unwrap_or_default();
    let arrived = shared.clock.now();
    let rejection = shared.check_token(&connection, &bearer).or_else(|| {
        shared
            .dead_tokens
            .lock()
            .unwrap()
            .contains(&token)
            .then_some((410, "Unregistered"))
    });
    let delay = tokio::time::sleep(shared.delay());
    tokio::pin!(delay);
    let reset = tokio::select! {
        () = &mut delay => false,
        _ = std::future::poll_fn(|cx| respond.poll_reset(cx)) => true,
    };
    if reset {
        // A stream the client reset is closed: it no longer counts against the limit (RFC 9113
        // §5.1.2). Its push was read, so it is processed all the same.
        active = None;
        shared.client_resets.fetch_add(1, Ordering::SeqCst);
        delay.await;
    }
    let status = rejection.map_or(200, |(status, _)| status);
    {
        // The limit follows the answer: 1 after a rejection, back after a success, advertised
        // right after the answer is written.
        let mut state = connection.inner.lock().unwrap();
        let limit = if rejection.is_some() {
            1
        } else {
            shared.settings.max_streams
        };
        if limit != state.limit {
            state.limit = limit;
            connection
                .injector
                .lock()
                .unwrap()
                .max_streams_after_answer(stream_id, limit);
        }
    }
    let fate = match rejection {
        None => Fate::Accepted,
        Some((status, _)) => Fate::Rejected(status),
    };
    shared.record_request(&connection, stream_id, (call_id, head, arrived), fate);
    let head = http::Response::builder()
        .status(status)
        .header("apns-id", "00000000-0000-0000-0000-000000000000")
        .body(())
        .expect("a valid response");
    match rejection {
        None => {
            let _ = respond.send_response(head, true);
        }
        Some((_, reason)) => {
            if let Ok(mut stream) = respond.send_response(head, false) {
                let body = serde_json::json!({ "reason": reason }).to_string();
                let _ = stream.send_data(Bytes::from(body), true);
            }
        }
    }
    drop(active);
}

/// A stream accepted and not yet answered (nor reset by the client).
struct Active(Arc<Connection>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.inner.lock().unwrap().active -= 1;
    }
}

/// Per call id, how many times the stand-in processed its push.
pub fn processed_per_call(seen: &[Seen]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for s in seen.iter().filter(|s| s.fate.processed()) {
        *counts.entry(s.call_id.clone()).or_default() += 1;
    }
    counts
}
