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

use async_trait::async_trait;
use koe::domain::device::Device;
use koe::push::{PushError, PushSender, VoipPush};
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

    /// The answer as the APNs adapter classifies it (`koe::push::classify::classify`).
    pub fn result(self) -> Result<(), PushError> {
        match self {
            Answer::Accepted => Ok(()),
            Answer::RefusedStream => Err(PushError::Retryable {
                status: None,
                reason: "client error (SendRequest): http2 error: stream error received: \
                         refused stream before processing any application logic"
                    .into(),
            }),
            Answer::ResetAfterRead => Err(PushError::MaybeDelivered {
                reason: "client error (SendRequest): http2 error: stream error received: \
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

impl Shared {
    /// How long the next push takes and how it is answered.
    fn draw(&self) -> (Duration, Answer) {
        let limits = &self.limits;
        let mut rng = self.rng.lock().unwrap();
        let jitter = limits.jitter.as_micros() as i64;
        let micros = limits.latency.as_micros() as i64 + rng.i64(-jitter..=jitter);
        let roll = rng.f64();
        let scripted = self.scripted.lock().unwrap().pop_front();
        let answer = if let Some(answer) = scripted {
            answer
        } else if roll < limits.p429 {
            Answer::TooManyRequests
        } else if roll < limits.p429 + limits.p500 {
            Answer::InternalServerError
        } else if roll < limits.p429 + limits.p500 + limits.p410 {
            Answer::Unregistered
        } else {
            Answer::Accepted
        };
        (Duration::from_micros(micros.max(0) as u64), answer)
    }
}

impl LimitedConnection {
    async fn connect(&self, by_a_push: bool) {
        self.state
            .handshake
            .get_or_init(|| async {
                if by_a_push {
                    self.shared.cold_connects.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(self.shared.limits.connect_time).await;
            })
            .await;
    }
}

#[async_trait]
impl PushSender for LimitedConnection {
    async fn send(&self, push: &VoipPush, _: &Device) -> Result<(), PushError> {
        let sent = Instant::now();
        self.state.used.fetch_add(1, Ordering::Relaxed);
        self.connect(true).await;
        let stream = match self.state.streams.try_acquire() {
            Ok(stream) => stream,
            Err(_) => {
                self.shared.queued.fetch_add(1, Ordering::Relaxed);
                self.state.streams.acquire().await.expect("never closed")
            }
        };
        let left = Instant::now();
        let in_flight = self.state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.state
            .max_in_flight
            .fetch_max(in_flight, Ordering::SeqCst);
        let (latency, answer) = self.shared.draw();
        tokio::time::sleep(latency).await;
        self.state.in_flight.fetch_sub(1, Ordering::SeqCst);
        drop(stream);
        self.shared.records.lock().unwrap().push(ApnsRecord {
            call: call_key(&push.call_id),
            connection: self.id,
            sent,
            left,
            answered: Instant::now(),
            answer,
        });
        answer.result()
    }

    /// Performs the handshake now (taking `connect_time`) if no push has started it.
    async fn warm(&self) {
        self.connect(false).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::push::push_and_device;

    fn send_all(
        connection: &Arc<dyn PushSender>,
        n: usize,
    ) -> tokio::task::JoinSet<Result<(), PushError>> {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..n {
            let connection = connection.clone();
            tasks.spawn(async move {
                let (push, device) = push_and_device("c1", "d1");
                connection.send(&push, &device).await
            });
        }
        tasks
    }

    fn exact(streams: usize) -> ApnsLimits {
        ApnsLimits {
            streams_per_connection: streams,
            latency: Duration::from_millis(100),
            jitter: Duration::ZERO,
            connect_time: Duration::from_millis(150),
            ..ApnsLimits::default()
        }
    }

    fn ms_after(start: Instant, at: Instant) -> u128 {
        (at - start).as_millis()
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_carries_its_streams_and_queues_the_rest_in_order_after_its_handshake() {
        let apns = LimitedApns::new(exact(2));
        let start = Instant::now();
        let connection = apns.connection();
        let results = send_all(&connection, 5).join_all().await;
        assert!(results.iter().all(Result::is_ok));

        let records = apns.records();
        let left: Vec<u128> = records.iter().map(|r| ms_after(start, r.left)).collect();
        let answered: Vec<u128> = records
            .iter()
            .map(|r| ms_after(start, r.answered))
            .collect();
        assert_eq!(left, [150, 150, 250, 250, 350]);
        assert_eq!(answered, [250, 250, 350, 350, 450]);
        let stats = apns.stats();
        assert_eq!(stats.queued, 3);
        assert_eq!(stats.max_in_flight_per_connection, 2);
        assert_eq!(stats.cold_connects, 1);
        assert_eq!((stats.connections_opened, stats.connections_used), (1, 1));
        assert_eq!(stats.accepted, 5);
    }

    #[tokio::test(start_paused = true)]
    async fn each_connection_has_its_own_streams() {
        let apns = LimitedApns::new(exact(2));
        let (a, b) = (apns.connection(), apns.connection());
        let (mut on_a, mut on_b) = (send_all(&a, 2), send_all(&b, 2));
        while on_a.join_next().await.is_some() || on_b.join_next().await.is_some() {}
        let stats = apns.stats();
        assert_eq!(stats.queued, 0);
        assert_eq!(stats.cold_connects, 2);
        let mut connections: Vec<usize> = apns.records().iter().map(|r| r.connection).collect();
        connections.sort();
        assert_eq!(connections, [0, 0, 1, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_warmed_connection_does_not_pay_the_handshake_at_its_first_push() {
        let apns = LimitedApns::new(exact(10));
        let connection = apns.connection();
        let before = Instant::now();
        connection.warm().await;
        assert_eq!(
            ms_after(before, Instant::now()),
            150,
            "warming is the handshake"
        );
        connection.warm().await;
        let start = Instant::now();
        assert_eq!(
            start,
            before + Duration::from_millis(150),
            "a second warm is free"
        );

        send_all(&connection, 3).join_all().await;
        for record in apns.records() {
            assert_eq!(record.left, start);
            assert_eq!(ms_after(start, record.answered), 100);
        }
        assert_eq!(apns.stats().cold_connects, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn latency_is_uniform_within_its_jitter() {
        let apns = LimitedApns::new(ApnsLimits::default());
        let connection = apns.connection();
        connection.warm().await;
        send_all(&connection, 500).join_all().await;
        let took: Vec<u128> = apns
            .records()
            .iter()
            .map(|r| (r.answered - r.left).as_millis())
            .collect();
        assert!(took.iter().all(|ms| (90..=150).contains(ms)), "{took:?}");
        assert!(took.iter().any(|ms| *ms < 100) && took.iter().any(|ms| *ms > 140));
    }

    #[tokio::test(start_paused = true)]
    async fn answers_come_with_their_probabilities_as_the_adapter_classifies_them() {
        let apns = LimitedApns::new(ApnsLimits {
            p429: 0.1,
            p500: 0.05,
            p410: 0.02,
            ..ApnsLimits::default()
        });
        let connection = apns.connection();
        let results = send_all(&connection, 10_000).join_all().await;
        let stats = apns.stats();
        assert_eq!(stats.queued, 9_000, "1,000 streams");
        assert_eq!(
            stats.accepted + stats.too_many_requests + stats.server_errors + stats.unregistered,
            10_000
        );
        // Generous bounds around 1,000 / 500 / 200 (several standard deviations).
        assert!((800..1200).contains(&stats.too_many_requests), "{stats:?}");
        assert!((350..650).contains(&stats.server_errors), "{stats:?}");
        assert!((100..300).contains(&stats.unregistered), "{stats:?}");

        let count =
            |wanted: &Result<(), PushError>| results.iter().filter(|r| *r == wanted).count();
        assert_eq!(count(&Answer::Accepted.result()), stats.accepted);
        assert_eq!(
            count(&Err(PushError::Retryable {
                status: Some(429),
                reason: "TooManyRequests".into()
            })),
            stats.too_many_requests
        );
        assert_eq!(
            count(&Err(PushError::Retryable {
                status: Some(500),
                reason: "InternalServerError".into()
            })),
            stats.server_errors
        );
        assert_eq!(
            count(&Err(PushError::InvalidToken {
                status: 410,
                reason: "Unregistered".into()
            })),
            stats.unregistered
        );
    }

    #[tokio::test(start_paused = true)]
    async fn scripted_answers_come_first_and_a_reset_after_read_is_delivered_unanswered() {
        let apns = LimitedApns::new(exact(10));
        apns.answer_next([Answer::ResetAfterRead, Answer::RefusedStream]);
        let connection = apns.connection();
        let (push, device) = push_and_device("c1", "d1");
        let results = [
            connection.send(&push, &device).await,
            connection.send(&push, &device).await,
            connection.send(&push, &device).await,
        ];
        assert!(
            matches!(results[0], Err(PushError::MaybeDelivered { .. })),
            "{results:?}"
        );
        assert!(
            matches!(results[1], Err(PushError::Retryable { status: None, .. })),
            "{results:?}"
        );
        assert_eq!(results[2], Ok(()), "then drawn: accepted");
        let stats = apns.stats();
        assert_eq!(
            (
                stats.resets_after_read,
                stats.refused_streams,
                stats.accepted
            ),
            (1, 1, 1)
        );
        assert_eq!(stats.delivered, 2, "the reset one reached the device");
    }

    #[tokio::test(start_paused = true)]
    async fn a_prepared_pool_stays_under_the_stream_limit_and_pays_no_handshake_in_the_second() {
        use koe::push::pool::{PoolSettings, PushPool};

        let apns = LimitedApns::new(ApnsLimits::default());
        let factory = {
            let apns = apns.clone();
            Arc::new(move || apns.connection())
        };
        let pool = Arc::new(PushPool::new(factory, PoolSettings::default()));
        pool.prepare(2_500).await;
        assert_eq!(apns.stats().connections_opened, 3);

        let pool: Arc<dyn PushSender> = pool;
        send_all(&pool, 2_500).join_all().await;
        let stats = apns.stats();
        assert_eq!(stats.connections_opened, 3);
        assert_eq!(stats.connections_used, 3);
        assert_eq!(stats.cold_connects, 0);
        assert_eq!(
            stats.queued, 0,
            "the pool keeps each connection under 1,000"
        );
        assert!(stats.max_in_flight_per_connection <= 900, "{stats:?}");
        assert_eq!(stats.accepted, 2_500);
    }
}
