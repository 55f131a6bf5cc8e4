//! A stand-in APNs with production's limits: per-connection streams, latency, handshakes, errors.
//!
//! [`LimitedApns::connection`] opens a simulated HTTP/2 connection to APNs, a `PushSender`.
//! Each connection carries at most `streams_per_connection` pushes at once; more wait for a
//! stream in arrival order, as an HTTP/2 client queues requests beyond the server's
//! SETTINGS_MAX_CONCURRENT_STREAMS. A connection's first use pays `connect_time` (TCP, TLS and
//! the HTTP/2 preface) unless it was warmed; each push then takes `latency` ± `jitter` and is
//! answered 200, 429, 500 or 410 with the configured probabilities. A test can also script the
//! next answers ([`LimitedApns::answer_next`]), among them a stream refused before it was read
//! (`REFUSED_STREAM`: not delivered) and one reset after it was read (delivered, but the sender
//! gets no answer). Runs on tokio time (real in a benchmark, paused in a test), and keeps one
//! small record per push, so 100,000 are cheap.
//!
//! Left out: real TLS, HTTP/2 flow control and window sizes, APNs's per-token and per-topic
//! rate limits, GOAWAY, provider-token renewal (docs/benchmarks.md, "APNs connection pool").

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use koe::push::{PushError, PushSender};
use tokio::sync::{OnceCell, Semaphore};
use tokio::time::Instant;

/// What the stand-in allows and how it answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ApnsLimits {
    /// APNs's SETTINGS_MAX_CONCURRENT_STREAMS (on the order of 1,000).
    pub streams_per_connection: usize,
    /// A push's round trip from ap-northeast-1.
    pub latency: Duration,
    /// Each push takes `latency` plus a uniform draw from `-jitter..=jitter`.
    pub jitter: Duration,
    /// TCP + TLS + HTTP/2 handshake, paid by the first use of a connection not warmed.
    pub connect_time: Duration,
    /// Probability of 429 `TooManyRequests`.
    pub p429: f64,
    /// Probability of 500 `InternalServerError`.
    pub p500: f64,
    /// Probability of 410 `Unregistered`.
    pub p410: f64,
    /// Seeds the latency and answer draws.
    pub seed: u64,
}

impl Default for ApnsLimits {
    fn default() -> ApnsLimits {
        ApnsLimits {
            streams_per_connection: 1000,
            latency: Duration::from_millis(120),
            jitter: Duration::from_millis(30),
            connect_time: Duration::from_millis(150),
            p429: 0.0,
            p500: 0.0,
            p410: 0.0,
            seed: 12,
        }
    }
}

/// How the stand-in answered one push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Accepted,
    TooManyRequests,
    InternalServerError,
    Unregistered,
    /// The stream was reset with `REFUSED_STREAM` before the request was read: not delivered.
    RefusedStream,
    /// The request was read (and the push delivered), then the stream was reset: the sender
    /// gets no answer.
    ResetAfterRead,
}

impl Answer {
    /// Whether the device receives the push.
    pub fn delivered(self) -> bool {
        matches!(self, Answer::Accepted | Answer::ResetAfterRead)
    }

    /// The answer as the APNs client classifies it (`koe::push::classify`).
    pub fn result(self) -> Result<(), PushError> {
        match self {
            Answer::Accepted => Ok(()),
            Answer::RefusedStream => Err(PushError::Retryable {
                status: None,
                reason: "the push's HTTP/2 stream failed: stream error received: refused \
                         stream before processing any application logic"
                    .into(),
            }),
            Answer::ResetAfterRead => Err(PushError::MaybeDelivered {
                reason: "the push's HTTP/2 stream failed: stream error received: \
                         unexpected internal error encountered"
                    .into(),
            }),
            Answer::TooManyRequests => Err(PushError::Retryable {
                status: Some(429),
                reason: "TooManyRequests".into(),
            }),
            Answer::InternalServerError => Err(PushError::Retryable {
                status: Some(500),
                reason: "InternalServerError".into(),
            }),
            Answer::Unregistered => Err(PushError::InvalidToken {
                status: 410,
                reason: "Unregistered".into(),
            }),
        }
    }
}

/// One push as the stand-in saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApnsRecord {
    /// Which call it was for ([`call_key`] of its `callId`).
    pub call: u64,
    /// The connection it used: 0 for the first one opened, and so on.
    pub connection: usize,
    /// When it was handed to the connection.
    pub sent: Instant,
    /// When it left: the connection was open and it had a stream.
    pub left: Instant,
    pub answered: Instant,
    pub answer: Answer,
}

/// A call id as a record keeps it (FNV-1a), so a record stays small and `Copy`.
pub fn call_key(call_id: &str) -> u64 {
    call_id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Totals over every connection so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ApnsStats {
    pub connections_opened: usize,
    /// Connections at least one push went through.
    pub connections_used: usize,
    /// Connections whose handshake a push waited for (not warmed before it).
    pub cold_connects: usize,
    /// The most pushes in flight on any one connection at once.
    pub max_in_flight_per_connection: usize,
    /// Pushes that found every stream of their connection taken and waited for one.
    pub queued: usize,
    pub accepted: usize,
    pub too_many_requests: usize,
    pub server_errors: usize,
    pub unregistered: usize,
    pub refused_streams: usize,
    pub resets_after_read: usize,
    /// Pushes the devices receive: accepted, or read before their stream was reset.
    pub delivered: usize,
}

/// The stand-in service; cheap to share (`Arc` inside).
#[derive(Clone)]
pub struct LimitedApns {
    shared: Arc<Shared>,
}

struct Shared {
    limits: ApnsLimits,
    rng: Mutex<fastrand::Rng>,
    /// Answers a test scripted for the next pushes, before any drawn one.
    scripted: Mutex<VecDeque<Answer>>,
    records: Mutex<Vec<ApnsRecord>>,
    connections: Mutex<Vec<Arc<ConnectionState>>>,
    queued: AtomicUsize,
    cold_connects: AtomicUsize,
}

struct ConnectionState {
    streams: Semaphore,
    handshake: OnceCell<()>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    used: AtomicUsize,
}

struct LimitedConnection {
    id: usize,
    state: Arc<ConnectionState>,
    shared: Arc<Shared>,
}

impl LimitedApns {
    pub fn new(limits: ApnsLimits) -> LimitedApns {
        LimitedApns {
            shared: Arc::new(Shared {
                limits,
                rng: Mutex::new(fastrand::Rng::with_seed(limits.seed)),
                scripted: Mutex::new(VecDeque::new()),
                records: Mutex::new(Vec::new()),
                connections: Mutex::new(Vec::new()),
                queued: AtomicUsize::new(0),
                cold_connects: AtomicUsize::new(0),
            }),
        }
    }

    pub fn limits(&self) -> ApnsLimits {
        self.shared.limits
    }

    /// Opens a new connection (its handshake happens at its first use or when warmed).
    pub fn connection(&self) -> Arc<dyn PushSender> {
        let state = Arc::new(ConnectionState {
            streams: Semaphore::new(self.shared.limits.streams_per_connection.max(1)),
            handshake: OnceCell::new(),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            used: AtomicUsize::new(0),
        });
        let mut connections = self.shared.connections.lock().unwrap();
        connections.push(state.clone());
        Arc::new(LimitedConnection {
            id: connections.len() - 1,
            state,
            shared: self.shared.clone(),
        })
    }

    /// The next pushes (on any connection, in the order they get a stream) are answered so,
    /// with the usual latency; later ones as drawn.
    pub fn answer_next(&self, answers: impl IntoIterator<Item = Answer>) {
        self.shared.scripted.lock().unwrap().extend(answers);
    }

    /// Every push answered so far, in the order they were answered.
    pub fn records(&self) -> Vec<ApnsRecord> {
        self.shared.records.lock().unwrap().clone()
    }

    pub fn stats(&self) -> ApnsStats {
        let mut stats = ApnsStats {
            queued: self.shared.queued.load(Ordering::SeqCst),
            cold_connects: self.shared.cold_connects.load(Ordering::SeqCst),
            ..ApnsStats::default()
        };
        for connection in self.shared.connections.lock().unwrap().iter() {
            stats.connections_opened += 1;
            if connection.used.load(Ordering::SeqCst) > 0 {
                stats.connections_used += 1;
            }
            stats.max_in_flight_per_connection = stats
                .max_in_flight_per_connection
                .max(connection.max_in_flight.load(Ordering::SeqCst));
        }
        for record in self.shared.records.lock().unwrap().iter() {
            match record.answer {
                Answer::Accepted => stats.accepted += 1,
                Answer::TooManyRequests => stats.too_many_requests += 1,
                Answer::InternalServerError => stats.server_errors += 1,
                Answer::Unregistered => stats.unregistered += 1,
                Answer::RefusedStream => stats.refused_streams += 1,
                Answer::ResetAfterRead => stats.resets_after_read += 1,
            }
            if record.answer.delivered() {
                stats.delivered += 1;
            }
        }
        stats
    }
}

mod connection;
#[cfg(test)]
mod tests;
