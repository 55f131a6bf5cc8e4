//! The strict stand-in's HTTP/2 framing seam: h2's server cannot change its
//! SETTINGS_MAX_CONCURRENT_STREAMS while a connection lives, nor send a GOAWAY with a last stream
//! id of our choosing, as APNs does. [`Framed`] sits between the socket and h2's server and
//! writes such frames into the server's byte stream at a frame boundary ([`Injector`]), and drops
//! the client's SETTINGS acknowledgements of injected SETTINGS (h2 would take them for an
//! unexpected ACK, a protocol error).

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const PREFACE_LEN: usize = 24;
const HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const DATA: u8 = 0x0;
const GOAWAY: u8 = 0x7;
const ACK: u8 = 0x1;
const END_STREAM: u8 = 0x1;
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;

/// Frames waiting to be written into the server's byte stream.
pub(super) struct Injector {
    queued: Vec<u8>,
    /// The stream limits of the injected SETTINGS frames not yet written, in order.
    queued_limits: VecDeque<u32>,
    /// The SETTINGS frames written, oldest first: an injected one with its stream limit (its
    /// ACK is dropped), h2's own as `None`.
    settings_sent: VecDeque<Option<u32>>,
    /// The last stream limit the client acknowledged (h2's own initial one until an injected
    /// one is).
    acknowledged: u32,
    /// Per stream the client opened and h2 has not yet handed over: the limit it had
    /// acknowledged as its HEADERS left it, if every injected SETTINGS written before had been
    /// acknowledged by then (`None`: a limit was changing under it).
    opened_under: HashMap<u32, Option<u32>>,
    /// Stream limits to advertise once h2 has written the end of its answer on a stream
    /// ([`Injector::max_streams_after_answer`]).
    after_answer: Vec<(u32, u32)>,
    /// Set once the connection reads nothing more from the client (after a graceful GOAWAY).
    deaf: bool,
    /// Requests still to read whole, on every connection, before one gets a graceful GOAWAY
    /// (`u64::MAX`: none asked for).
    go_away_in: Arc<AtomicU64>,
    /// Streams whose HEADERS were read and whose request is not yet whole, in byte order.
    incomplete: HashSet<u32>,
    /// The graceful GOAWAY's last stream id, once sent: the request read whole that made it.
    pub(super) taken_last: Option<u32>,
    /// The streams not read whole when the GOAWAY went: they never will be (not processed).
    pub(super) unread: HashSet<u32>,
}

impl Injector {
    /// On a connection whose server advertised `initial` streams; `go_away_in` counts the
    /// requests read whole (shared by every connection) down to the one that gets a GOAWAY.
    pub(super) fn new(initial: u32, go_away_in: Arc<AtomicU64>) -> Injector {
        Injector {
            queued: Vec::new(),
            queued_limits: VecDeque::new(),
            settings_sent: VecDeque::new(),
            acknowledged: initial,
            opened_under: HashMap::new(),
            after_answer: Vec::new(),
            deaf: false,
            go_away_in,
            incomplete: HashSet::new(),
            taken_last: None,
            unread: HashSet::new(),
        }
    }

    /// A SETTINGS frame advertising `max_streams`, written right after h2 has written the last
    /// frame of its answer on `stream_id` (the outside server's order: the answer, then the new
    /// limit).
    pub(super) fn max_streams_after_answer(&mut self, stream_id: u32, max_streams: u32) {
        self.after_answer.push((stream_id, max_streams));
    }

    /// `stream_id` was refused: its request is not one the server reads.
    pub(super) fn refused(&mut self, stream_id: u32) {
        self.incomplete.remove(&stream_id);
    }

    /// A request is read whole (its END_STREAM, in the byte stream's order, as a server reading
    /// frames one by one sees it): the `go_away_in`-th gets a graceful GOAWAY naming it as the
    /// last stream id, and nothing more is read on the connection. Returns whether it did.
    fn taken(&mut self, stream_id: u32) -> bool {
        if self.go_away_in.fetch_sub(1, Ordering::SeqCst) != 1 {
            return false;
        }
        self.taken_last = Some(stream_id);
        self.unread = std::mem::take(&mut self.incomplete);
        self.go_away(stream_id, h2::Reason::NO_ERROR, "");
        self.deaf = true;
        true
    }

    /// A SETTINGS frame advertising `max_streams`.
    pub(super) fn max_streams(&mut self, max_streams: u32) {
        let mut payload = SETTINGS_MAX_CONCURRENT_STREAMS.to_be_bytes().to_vec();
        payload.extend_from_slice(&max_streams.to_be_bytes());
        self.queued_limits.push_back(max_streams);
        self.frame(SETTINGS, &payload);
    }

    /// Whether the client acknowledged every injected SETTINGS: it knows the limit in force.
    fn settled(&self) -> bool {
        self.queued_limits.is_empty() && self.settings_sent.iter().all(Option::is_none)
    }

    /// The stream limit the client had acknowledged when it opened `stream_id` (its HEADERS
    /// after that acknowledgement in the byte stream, however late the server reads them);
    /// `None` if a changed limit had been written and not yet acknowledged (RFC 9113 §6.5.3:
    /// the client may not know it yet).
    pub(super) fn limit_known_at_open(&mut self, stream_id: u32) -> Option<u32> {
        self.opened_under.remove(&stream_id).flatten()
    }

    /// A GOAWAY frame: streams above `last_stream_id` were not processed.
    pub(super) fn go_away(&mut self, last_stream_id: u32, reason: h2::Reason, debug: &str) {
        let mut payload = (last_stream_id & 0x7fff_ffff).to_be_bytes().to_vec();
        payload.extend_from_slice(&u32::from(reason).to_be_bytes());
        payload.extend_from_slice(debug.as_bytes());
        self.frame(GOAWAY, &payload);
    }

    fn frame(&mut self, kind: u8, payload: &[u8]) {
        let len = (payload.len() as u32).to_be_bytes();
        self.queued.extend_from_slice(&len[1..]);
        self.queued.extend_from_slice(&[kind, 0, 0, 0, 0, 0]);
        self.queued.extend_from_slice(payload);
    }
}

/// The socket as h2's server sees it.
pub(super) struct Framed<T> {
    io: T,
    injector: Arc<Mutex<Injector>>,
    /// Outgoing: injected bytes not yet written, and where h2's own frames stand.
    out_pending: Vec<u8>,
    out_header: Vec<u8>,
    out_left: usize,
    /// Incoming: bytes read and not yet parsed, and whole frames ready for h2.
    in_raw: Vec<u8>,
    in_ready: Vec<u8>,
    preface_seen: bool,
}

/// The stream id of a frame header.
fn stream_of(header: &[u8]) -> u32 {
    u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff
}

impl<T> Framed<T> {
    pub(super) fn new(io: T, injector: Arc<Mutex<Injector>>) -> Framed<T> {
        Framed {
            io,
            injector,
            out_pending: Vec::new(),
            out_header: Vec::new(),
            out_left: 0,
            in_raw: Vec::new(),
            in_ready: Vec::new(),
            preface_seen: false,
        }
    }

    /// Follows h2's outgoing frames through `bytes`, noting its SETTINGS frames.
    fn track_out(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.out_left > 0 {
                let n = self.out_left.min(bytes.len());
                self.out_left -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (HEADER_LEN - self.out_header.len()).min(bytes.len());
            self.out_header.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.out_header.len() == HEADER_LEN {
                let h = &self.out_header;
                self.out_left = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
                let mut injector = self.injector.lock().unwrap();
                if h[3] == SETTINGS && h[4] & ACK == 0 {
                    injector.settings_sent.push_back(None);
                }
                if matches!(h[3], HEADERS | DATA) && h[4] & END_STREAM != 0 {
                    // The answer on this stream is written (once this frame's payload is):
                    // limits waiting for it are queued, to go out at the next frame boundary.
                    let stream_id = stream_of(h);
                    let waiting = std::mem::take(&mut injector.after_answer);
                    for (stream, limit) in waiting {
                        if stream == stream_id {
                            injector.max_streams(limit);
                        } else {
                            injector.after_answer.push((stream, limit));
                        }
                    }
                }
                drop(injector);
                self.out_header.clear();
            }
        }
    }

    fn at_boundary(&self) -> bool {
        self.out_left == 0 && self.out_header.is_empty()
    }

    /// Moves whole incoming frames from `in_raw` to `in_ready`, dropping ACKs of injected
    /// SETTINGS.
    fn parse_in(&mut self) {
        if !self.preface_seen {
            if self.in_raw.len() < PREFACE_LEN {
                return;
            }
            self.in_ready.extend(self.in_raw.drain(..PREFACE_LEN));
            self.preface_seen = true;
        }
        while self.in_raw.len() >= HEADER_LEN {
            let h = &self.in_raw;
            let len = HEADER_LEN + u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
            if self.in_raw.len() < len {
                return;
            }
            let injected_ack = h[3] == SETTINGS && h[4] & ACK != 0 && {
                let mut injector = self.injector.lock().unwrap();
                let acked = injector.settings_sent.pop_front().flatten();
                if let Some(limit) = acked {
                    injector.acknowledged = limit;
                }
                acked.is_some()
            };
            let (kind, ends) = (h[3], h[4] & END_STREAM != 0);
            let stream_id = stream_of(h);
            let mut injector = self.injector.lock().unwrap();
            if kind == HEADERS {
                // Judged here, in the byte stream's order: an ACK read in the same chunk after
                // these HEADERS was not yet sent when the client opened the stream.
                let known = injector.settled().then_some(injector.acknowledged);
                injector.opened_under.insert(stream_id, known);
                if !ends {
                    injector.incomplete.insert(stream_id);
                }
            }
            // A request is whole at its END_STREAM: on its HEADERS, or on a DATA frame of a
            // stream still being read (not one refused meanwhile).
            let whole = ends
                && match kind {
                    HEADERS => true,
                    DATA => injector.incomplete.remove(&stream_id),
                    _ => false,
                };
            let went_away = whole && injector.taken(stream_id);
            drop(injector);
            let frame: Vec<u8> = self.in_raw.drain(..len).collect();
            if !injected_ack {
                self.in_ready.extend(frame);
            }
            if went_away {
                // Nothing after this frame is read: what was read past it is dropped unread.
                self.in_raw.clear();
                return;
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Framed<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            if !self.in_ready.is_empty() {
                let n = self.in_ready.len().min(buf.remaining());
                buf.put_slice(&self.in_ready[..n]);
                self.in_ready.drain(..n);
                return Poll::Ready(Ok(()));
            }
            if self.injector.lock().unwrap().deaf {
                // Nothing more is read: the connection is closed by its server later.
                return Poll::Pending;
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut self.io).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) if read.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => {
                    let filled = read.filled().to_vec();
                    self.in_raw.extend_from_slice(&filled);
                    self.parse_in();
                }
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> Framed<T> {
    /// Writes injected frames (at a frame boundary of h2's own) until none is left.
    fn poll_injected(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        loop {
            if self.out_pending.is_empty() && self.at_boundary() {
                let mut injector = self.injector.lock().unwrap();
                if !injector.queued.is_empty() {
                    self.out_pending = std::mem::take(&mut injector.queued);
                    // Each injected SETTINGS frame is acknowledged in order: count them.
                    let mut at = 0;
                    while at + HEADER_LEN <= self.out_pending.len() {
                        let h = &self.out_pending[at..];
                        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
                        if h[3] == SETTINGS {
                            let limit = injector.queued_limits.pop_front();
                            injector.settings_sent.push_back(limit);
                        }
                        at += HEADER_LEN + len;
                    }
                }
            }
            if self.out_pending.is_empty() {
                return Poll::Ready(Ok(()));
            }
            let pending = std::mem::take(&mut self.out_pending);
            match Pin::new(&mut self.io).poll_write(cx, &pending) {
                Poll::Ready(Ok(n)) => self.out_pending = pending[n..].to_vec(),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    self.out_pending = pending;
                    return Poll::Pending;
                }
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Framed<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_injected(cx))?;
        let n = std::task::ready!(Pin::new(&mut this.io).poll_write(cx, buf))?;
        this.track_out(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        std::task::ready!(self.poll_injected(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
        let mut bytes = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        bytes.extend_from_slice(&[kind, flags]);
        bytes.extend_from_slice(&stream_id.to_be_bytes());
        bytes.extend_from_slice(payload);
        bytes
    }

    /// A connection at 1,000 streams, no GOAWAY due, its preface read.
    fn past_the_preface() -> (Arc<Mutex<Injector>>, Framed<()>) {
        let go_away_in = Arc::new(AtomicU64::new(u64::MAX));
        let injector = Arc::new(Mutex::new(Injector::new(1000, go_away_in)));
        let mut framed = Framed::new((), injector.clone());
        framed.preface_seen = true;
        (injector, framed)
    }

    /// Under load the server reads a stream's HEADERS and the client's later ACK of a lowered
    /// limit in one chunk: the stream was opened before the client knew the limit, and is not
    /// held against it; one opened after the ACK is.
    #[test]
    fn a_stream_is_judged_by_the_limit_acknowledged_before_it_in_the_byte_stream() {
        let (injector, mut framed) = past_the_preface();
        // A lowered limit written to the client, not yet acknowledged.
        injector.lock().unwrap().settings_sent.push_back(Some(1));
        let mut chunk = frame(HEADERS, 0x4, 1, b"");
        chunk.extend(frame(SETTINGS, ACK, 0, b""));
        chunk.extend(frame(HEADERS, 0x4, 3, b""));
        framed.in_raw.extend(chunk);
        framed.parse_in();
        let mut injector = injector.lock().unwrap();
        assert_eq!(injector.limit_known_at_open(1), None);
        assert_eq!(injector.limit_known_at_open(3), Some(1));
        // Each stream's judgement is taken once.
        assert_eq!(injector.limit_known_at_open(3), None);
    }

    #[test]
    fn before_any_change_the_initial_limit_is_known() {
        let (injector, mut framed) = past_the_preface();
        framed.in_raw.extend(frame(HEADERS, 0x4, 1, b""));
        framed.parse_in();
        assert_eq!(injector.lock().unwrap().limit_known_at_open(1), Some(1000));
    }
}
