//! A pool of push connections, each kept under its stream limit, ready before the second.
//!
//! One APNs connection (one HTTP/2 connection) carries about 1,000 concurrent HTTP/2 streams, and a
//! push from ap-northeast-1 takes 100 ms or more, so one connection cannot send 10,000 pushes
//! within a second. The pool holds up to `max_connections` connections made by a factory and
//! keeps at most `streams_per_connection` of our pushes in flight on each (a margin under the
//! 1,000 APNs allows on connect; each connection also keeps to the limit the server advertises
//! now, `push::connection`). A push that finds no free stream within [`PoolSettings::wait`] is
//! given back unsent. [`PushPool::prepare`] opens and warms the connections a second will need
//! before it begins.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::join_all;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{Notice, PushError, PushSender, VoipPush};
use crate::domain::device::Device;

/// Makes one new connection (for APNs: a new `ApnsSender`, with connections of its own).
pub type ConnectionFactory = Arc<dyn Fn() -> Arc<dyn PushSender> + Send + Sync>;

/// Our pushes in flight per connection: a margin under the 1,000 concurrent streams APNs allows.
pub const DEFAULT_STREAMS_PER_CONNECTION: usize = 900;
/// Connections per pool unless configured (`APNS_MAX_CONNECTIONS`).
pub const DEFAULT_MAX_CONNECTIONS: usize = crate::platform::config::DEFAULT_APNS_MAX_CONNECTIONS;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// At least 1.
    pub max_connections: usize,
    /// At least 1.
    pub streams_per_connection: usize,
    /// How long a push may wait for a free stream of the pool before it is given back unsent
    /// (as a connection gives back one that gets no stream of its own in time,
    /// `ConnectionTimings::stream`): under the dispatcher's push budget, so a push that never
    /// left is not mistaken for one that got no answer.
    pub wait: Duration,
}

impl Default for PoolSettings {
    fn default() -> PoolSettings {
        PoolSettings {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            streams_per_connection: DEFAULT_STREAMS_PER_CONNECTION,
            wait: super::connection::ConnectionTimings::default().stream,
        }
    }
}

struct Connection {
    sender: Arc<dyn PushSender>,
    streams: Arc<Semaphore>,
}

pub struct PushPool {
    factory: ConnectionFactory,
    settings: PoolSettings,
    /// Every free stream of the pool, open or not yet opened (`max_connections` ×
    /// `streams_per_connection`). A push takes one of these first, in arrival order, so whoever
    /// holds one is sure to find a free stream on an open connection or room for a new one.
    capacity: Arc<Semaphore>,
    /// Open connections, oldest first; only ever grows. Never held across an await.
    connections: Mutex<Vec<Arc<Connection>>>,
    /// Pushes that found every stream taken and waited.
    waited: AtomicUsize,
    /// Times a push waited its hop on a connection and went on to another.
    hopped: AtomicUsize,
}

/// How long a push waits on one connection for a stream the server allows before it tries
/// another (`PushPool::send`): a connection's limit may fall under the pushes it took (to 1
/// after a rejected push, until its next success), and they should not wait on it.
pub const HOP: std::time::Duration = std::time::Duration::from_millis(50);

impl PushPool {
    pub fn new(factory: ConnectionFactory, settings: PoolSettings) -> PushPool {
        let settings = PoolSettings {
            max_connections: settings.max_connections.max(1),
            streams_per_connection: settings.streams_per_connection.max(1),
            wait: settings.wait,
        };
        PushPool {
            factory,
            capacity: Arc::new(Semaphore::new(
                settings.max_connections * settings.streams_per_connection,
            )),
            settings,
            connections: Mutex::new(Vec::new()),
            waited: AtomicUsize::new(0),
            hopped: AtomicUsize::new(0),
        }
    }

    pub fn settings(&self) -> PoolSettings {
        self.settings
    }

    /// How many connections the pool has opened.
    pub fn connections_open(&self) -> usize {
        self.connections.lock().unwrap().len()
    }

    /// How many pushes so far found every stream taken and waited for one.
    pub fn pushes_waited(&self) -> usize {
        self.waited.load(Ordering::Relaxed)
    }

    /// How many times so far a push waited its [`HOP`] on a connection and went to another.
    pub fn hops(&self) -> usize {
        self.hopped.load(Ordering::Relaxed)
    }

    /// Before a second with `expected_in_second` pushes: opens connections until there are
    /// enough streams for them (up to `max_connections`) and warms them, so the second's first
    /// pushes do not pay connection setup. Returns once they are warm.
    pub async fn prepare(&self, expected_in_second: usize) {
        let wanted = expected_in_second
            .div_ceil(self.settings.streams_per_connection)
            .min(self.settings.max_connections);
        let to_warm: Vec<Arc<Connection>> = {
            let mut connections = self.connections.lock().unwrap();
            while connections.len() < wanted {
                connections.push(self.open());
            }
            connections[..wanted].to_vec()
        };
        join_all(to_warm.iter().map(|c| c.sender.warm())).await;
    }

    fn open(&self) -> Arc<Connection> {
        Arc::new(Connection {
            sender: (self.factory)(),
            streams: Arc::new(Semaphore::new(self.settings.streams_per_connection)),
        })
    }

    /// Until when a push starting now may wait: `wait` at most, or until `leave_by` if sooner.
    fn until(&self, leave_by: Option<tokio::time::Instant>) -> tokio::time::Instant {
        let waited = tokio::time::Instant::now() + self.settings.wait;
        leave_by.map_or(waited, |by| by.min(waited))
    }

    /// A free stream of the pool, waited for in arrival order for `wait` at most (or until
    /// `leave_by`, if sooner); else the push is given back unsent.
    async fn free_stream(
        &self,
        leave_by: Option<tokio::time::Instant>,
    ) -> Result<OwnedSemaphorePermit, PushError> {
        let free = self.capacity.clone().acquire_owned();
        let start = tokio::time::Instant::now();
        let until = self.until(leave_by);
        match tokio::time::timeout_at(until, free).await {
            Ok(permit) => Ok(permit.expect("the pool's semaphore is never closed")),
            Err(_) => Err(PushError::Retryable {
                status: None,
                reason: format!(
                    "every stream of the push pool stayed busy for {} ms",
                    (until - start).as_millis()
                ),
            }),
        }
    }

    /// A stream on the least-loaded open connection the server lets take one more stream now,
    /// else on a new one (a connection whose limit APNs lowered, say to 1 after a rejected
    /// push, is passed over while others have room), else on the least-loaded one. Only called
    /// with a `capacity` permit held, which guarantees a free stream or room for a connection.
    fn stream(&self) -> (Arc<Connection>, OwnedSemaphorePermit) {
        let mut connections = self.connections.lock().unwrap();
        let least_loaded = |with_room: bool| {
            connections
                .iter()
                .filter(|c| c.streams.available_permits() > 0)
                .filter(|c| !with_room || c.sender.headroom() != Some(0))
                .max_by_key(|c| c.streams.available_permits())
                .cloned()
        };
        let room_for_one = connections.len() < self.settings.max_connections;
        let connection = match least_loaded(true) {
            Some(connection) => connection,
            None if room_for_one => {
                let connection = self.open();
                connections.push(connection.clone());
                connection
            }
            None => least_loaded(false)
                .expect("a capacity permit guarantees a free stream or room for a connection"),
        };
        // Streams are only taken under the lock, so the free stream seen above is still free.
        let permit = connection
            .streams
            .clone()
            .try_acquire_owned()
            .expect("a free stream was seen under the lock");
        (connection, permit)
    }
}

#[async_trait]
impl PushSender for PushPool {
    async fn send(&self, push: &VoipPush, device: &Device) -> Result<(), PushError> {
        let _capacity = match self.capacity.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                self.waited.fetch_add(1, Ordering::Relaxed);
                self.free_stream(push.leave_by).await?
            }
        };
        // A push waits on one connection at most `HOP` for a stream the server allows (not for
        // the connection to open, nor for its PING check): should the limit fall under it
        // meanwhile (APNs lowers it to 1 after a rejected push), it is given back unsent and
        // goes on another connection, or a new one, as Pushy and Gorush do, until its own wait
        // ends.
        let until = self.until(push.leave_by);
        loop {
            let (connection, stream) = self.stream();
            let hop = (tokio::time::Instant::now() + HOP).min(until);
            let result = connection
                .sender
                .send(
                    &push.clone().leaving_by(until).finding_stream_by(hop),
                    device,
                )
                .await;
            // The stream goes back before the capacity permit, so a capacity holder always
            // finds one.
            drop(stream);
            let now = tokio::time::Instant::now();
            // Never left, after waiting its whole hop on a connection that has no stream free
            // now: another connection is tried while the push's own wait lasts. One given back
            // sooner (a connection that failed to open), or while its connection has room (a
            // request APNs answered or refused), goes back to the caller.
            let no_room = !matches!(connection.sender.headroom(), Some(free) if free > 0);
            match result {
                Err(PushError::Retryable { status: None, .. })
                    if now >= hop && now < until && no_room =>
                {
                    self.hopped.fetch_add(1, Ordering::Relaxed);
                }
                result => return result,
            }
        }
    }

    /// A notice goes over the pool's connections like a call push (`PushPool::send`'s limits).
    async fn send_notice(&self, notice: Notice<'_>) -> Result<(), PushError> {
        let _capacity = self.free_stream(None).await?;
        let (connection, stream) = self.stream();
        let result = connection.sender.send_notice(notice).await;
        drop(stream);
        result
    }

    async fn prepare(&self, expected_in_second: usize) {
        PushPool::prepare(self, expected_in_second).await;
    }

    /// Warms every connection already open.
    async fn warm(&self) {
        let open: Vec<Arc<Connection>> = self.connections.lock().unwrap().clone();
        join_all(open.iter().map(|c| c.sender.warm())).await;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use chrono::Utc;

    use super::*;
    use crate::domain::device::{DeviceId, PushEnvironment, VoipToken};

    const HOLD: Duration = Duration::from_millis(100);

    /// What the pool did with its fake connections, each of which answers after `HOLD` (paused
    /// test time, so only counts and orders are asserted).
    #[derive(Default)]
    struct Counts {
        opened: AtomicUsize,
        warmed: AtomicUsize,
        started: AtomicUsize,
        in_flight: AtomicUsize,
        max_in_flight: AtomicUsize,
        max_on_one: AtomicUsize,
    }

    struct FakeConnection(Arc<Counts>, AtomicUsize, Result<(), PushError>);

    #[async_trait]
    impl PushSender for FakeConnection {
        async fn send(&self, _: &VoipPush, _: &Device) -> Result<(), PushError> {
            let FakeConnection(counts, mine, answer) = self;
            counts.started.fetch_add(1, Ordering::SeqCst);
            let all = counts.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            counts.max_in_flight.fetch_max(all, Ordering::SeqCst);
            let on_this = mine.fetch_add(1, Ordering::SeqCst) + 1;
            counts.max_on_one.fetch_max(on_this, Ordering::SeqCst);
            tokio::time::sleep(HOLD).await;
            mine.fetch_sub(1, Ordering::SeqCst);
            counts.in_flight.fetch_sub(1, Ordering::SeqCst);
            answer.clone()
        }

        async fn warm(&self) {
            self.0.warmed.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn pool(connections: usize, streams: usize) -> (Arc<PushPool>, Arc<Counts>) {
        answering(connections, streams, Ok(()))
    }

    fn answering(
        max_connections: usize,
        streams_per_connection: usize,
        answer: Result<(), PushError>,
    ) -> (Arc<PushPool>, Arc<Counts>) {
        let counts = Arc::new(Counts::default());
        let opened = counts.clone();
        let factory: ConnectionFactory = Arc::new(move || {
            opened.opened.fetch_add(1, Ordering::SeqCst);
            Arc::new(FakeConnection(
                opened.clone(),
                AtomicUsize::new(0),
                answer.clone(),
            ))
        });
        let settings = PoolSettings {
            max_connections,
            streams_per_connection,
            wait: HOLD * 100,
        };
        (Arc::new(PushPool::new(factory, settings)), counts)
    }

    /// A call's first push to a production device (also the wiring tests').
    pub(crate) fn push_and_device() -> (VoipPush, Device) {
        let now = Utc::now();
        let push = VoipPush {
            aps: Default::default(),
            call_id: "c1".into(),
            attempt: 1,
            caller_name: None,
            scheduled_at: "2026-01-01T07:00:00+09:00".into(),
            expires_at: now,
            leave_by: None,
            stream_by: None,
        };
        let device = Device {
            device_id: DeviceId::parse("deviceId", "d1").unwrap(),
            voip_token: VoipToken::parse("voipToken", &"ab".repeat(32)).unwrap(),
            environment: PushEnvironment::Production,
            updated_at: now,
            confirms_calls: false,
            alert_token: None,
        };
        (push, device)
    }

    fn spawn_sends(pool: &Arc<PushPool>, n: usize) -> tokio::task::JoinSet<Result<(), PushError>> {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..n {
            let pool = pool.clone();
            tasks.spawn(async move {
                let (push, device) = push_and_device();
                pool.send(&push, &device).await
            });
        }
        tasks
    }

    /// Lets spawned tasks run until they block (paused time does not move meanwhile).
    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    fn count(counter: &AtomicUsize) -> usize {
        counter.load(Ordering::SeqCst)
    }

    #[tokio::test(start_paused = true)]
    async fn concurrency_never_exceeds_streams_times_connections() {
        let (pool, counts) = pool(3, 4);
        let results = spawn_sends(&pool, 50).join_all().await;
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(count(&counts.started), 50);
        assert_eq!(count(&counts.opened), 3);
        assert_eq!(
            count(&counts.max_in_flight),
            12,
            "all streams used, no more"
        );
        assert_eq!(count(&counts.max_on_one), 4);
        assert_eq!(pool.pushes_waited(), 50 - 12);
        assert_eq!(
            pool.capacity.available_permits(),
            12,
            "every permit returned"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pool_of_one_with_ten_streams_queues_the_eleventh() {
        let (pool, counts) = pool(1, 10);
        let tasks = spawn_sends(&pool, 11);
        settle().await;
        assert_eq!(count(&counts.started), 10);
        assert_eq!(pool.pushes_waited(), 1);
        tokio::time::sleep(HOLD + Duration::from_millis(1)).await;
        assert_eq!(count(&counts.started), 11, "the 11th got a freed stream");
        assert_eq!(count(&counts.in_flight), 1);
        assert!(tasks.join_all().await.iter().all(Result::is_ok));
        assert_eq!(count(&counts.opened), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn least_loaded_first_and_a_new_connection_only_when_all_are_full() {
        let (pool, counts) = pool(4, 2);
        let _first = spawn_sends(&pool, 2);
        settle().await;
        assert_eq!(count(&counts.opened), 1, "one connection holds two");
        let _more = spawn_sends(&pool, 3);
        settle().await;
        assert_eq!(count(&counts.opened), 3);
        assert_eq!(count(&counts.max_on_one), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn prepare_opens_and_warms_what_the_second_needs_up_to_the_maximum() {
        for (expected, opened) in [(0, 0), (1, 1), (1_800, 2), (1_801, 3), (10_000, 8)] {
            let (pool, counts) = pool(8, 900);
            pool.prepare(expected).await;
            assert_eq!(count(&counts.opened), opened, "{expected}");
            assert_eq!(count(&counts.warmed), opened, "{expected}");
            assert_eq!(pool.connections_open(), opened);
        }
        let (pool, counts) = pool(8, 900);
        pool.prepare(900).await;
        pool.prepare(2_700).await;
        assert_eq!(
            count(&counts.opened),
            3,
            "a second prepare opens only what is missing"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_connections_error_passes_through_unchanged_and_frees_its_stream() {
        let unregistered = PushError::InvalidToken {
            status: 410,
            reason: "Unregistered".into(),
        };
        let (pool, counts) = answering(1, 1, Err(unregistered.clone()));
        let (push, device) = push_and_device();
        for _ in 0..3 {
            assert_eq!(pool.send(&push, &device).await, Err(unregistered.clone()));
        }
        assert_eq!(count(&counts.opened), 1);
    }

    /// A connection the server allows no more streams now (its limit lowered to 1 after a
    /// rejected push, that stream in use) is passed over: the push goes on a new connection.
    #[tokio::test(start_paused = true)]
    async fn a_connection_the_server_keeps_full_is_passed_over_for_a_new_one() {
        struct Full(Arc<AtomicUsize>, Option<usize>);
        #[async_trait]
        impl PushSender for Full {
            async fn send(&self, _: &VoipPush, _: &Device) -> Result<(), PushError> {
                self.0.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
            fn headroom(&self) -> Option<usize> {
                self.1
            }
        }
        let (opened, on_full) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (counter, full) = (opened.clone(), on_full.clone());
        let factory: ConnectionFactory = Arc::new(move || -> Arc<dyn PushSender> {
            match counter.fetch_add(1, Ordering::SeqCst) {
                0 => Arc::new(Full(full.clone(), Some(0))),
                _ => Arc::new(Full(Arc::new(AtomicUsize::new(0)), Some(5))),
            }
        });
        let settings = PoolSettings {
            max_connections: 2,
            ..PoolSettings::default()
        };
        let pool = PushPool::new(factory, settings);
        pool.prepare(1).await;
        let (push, device) = push_and_device();
        assert_eq!(pool.send(&push, &device).await, Ok(()));
        assert_eq!(count(&opened), 2);
        assert_eq!(count(&on_full), 0, "nothing went on the full connection");
        // With no room for another connection, the full one still takes pushes (they wait on it).
        let one = PoolSettings {
            max_connections: 1,
            ..PoolSettings::default()
        };
        let counter = Arc::new(AtomicUsize::new(0));
        let full = counter.clone();
        let factory: ConnectionFactory =
            Arc::new(move || -> Arc<dyn PushSender> { Arc::new(Full(full.clone(), Some(0))) });
        let pool = PushPool::new(factory, one);
        assert_eq!(pool.send(&push, &device).await, Ok(()));
        assert_eq!(count(&counter), 1);
    }

    /// A pool of one connection with one stream, taken by a push in flight (answered after
    /// `HOLD`), whose wait is `HOLD / 2`: the pool, its counts, the push in flight.
    async fn one_stream_taken() -> (
        Arc<PushPool>,
        Arc<Counts>,
        tokio::task::JoinSet<Result<(), PushError>>,
    ) {
        let (busy, counts) = pool(1, 1);
        let settings = PoolSettings {
            wait: HOLD / 2,
            ..busy.settings()
        };
        let pool = Arc::new(PushPool::new(busy.factory.clone(), settings));
        let first = spawn_sends(&pool, 1);
        settle().await;
        (pool, counts, first)
    }

    fn assert_unsent(result: &Result<(), PushError>) {
        let unsent = matches!(result, Err(PushError::Retryable { status: None, .. }));
        assert!(unsent, "{result:?}");
    }

    /// Never left: the dispatcher may send it again (a push cut off at its budget while it
    /// waited here would be taken for one that got no answer).
    #[tokio::test(start_paused = true)]
    async fn a_push_that_finds_every_stream_busy_for_its_wait_is_given_back_unsent() {
        let (pool, counts, mut first) = one_stream_taken().await;
        let (push, device) = push_and_device();
        let second = pool.send(&push, &device).await;
        assert_unsent(&second);
        assert_eq!(
            count(&counts.started),
            1,
            "the second never reached a connection"
        );
        assert!(first.join_next().await.unwrap().unwrap().is_ok());
    }

    /// A push that must leave sooner than the pool's wait (its caller's budget ends) comes back
    /// unsent by then, never cut off while it waits, which its caller would take for a push
    /// that may have left.
    #[tokio::test(start_paused = true)]
    async fn a_push_that_cannot_leave_by_its_deadline_is_given_back_unsent_by_then() {
        let (pool, _, mut first) = one_stream_taken().await;
        let (push, device) = push_and_device();
        let leave_by = tokio::time::Instant::now() + HOLD / 10;
        let second = pool.send(&push.leaving_by(leave_by), &device).await;
        assert_unsent(&second);
        assert_eq!(
            tokio::time::Instant::now(),
            leave_by,
            "given back at its deadline"
        );
        assert!(first.join_next().await.unwrap().unwrap().is_ok());
    }

    /// A connection whose limit falls under the pushes it took (APNs lowers it to 1 after a
    /// rejected push): they wait on it for a `HOP` at most, then go on another connection,
    /// not back to the dispatcher unsent at the end of their wait.
    #[tokio::test(start_paused = true)]
    async fn pushes_on_a_connection_whose_limit_fell_go_on_another_within_a_hop() {
        /// The first connection: takes five pushes, then its limit falls to 1, held by its first
        /// (answered late); the others get no stream on it (given back at their `leave_by`).
        struct Fell(AtomicUsize);
        #[async_trait]
        impl PushSender for Fell {
            async fn send(&self, push: &VoipPush, _: &Device) -> Result<(), PushError> {
                if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
                    tokio::time::sleep(HOLD * 50).await;
                    return Ok(());
                }
                match push.stream_by {
                    Some(by) => tokio::time::sleep_until(by).await,
                    None => std::future::pending().await,
                }
                Err(PushError::Retryable {
                    status: None,
                    reason: "no stream the server allows in time".into(),
                })
            }
            fn headroom(&self) -> Option<usize> {
                Some(5usize.saturating_sub(self.0.load(Ordering::SeqCst)))
            }
        }
        struct Answers(Arc<AtomicUsize>);
        #[async_trait]
        impl PushSender for Answers {
            async fn send(&self, _: &VoipPush, _: &Device) -> Result<(), PushError> {
                self.0.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        }
        let (opened, on_second) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (counter, second) = (opened.clone(), on_second.clone());
        let factory: ConnectionFactory = Arc::new(move || -> Arc<dyn PushSender> {
            match counter.fetch_add(1, Ordering::SeqCst) {
                0 => Arc::new(Fell(AtomicUsize::new(0))),
                _ => Arc::new(Answers(second.clone())),
            }
        });
        let settings = PoolSettings {
            max_connections: 2,
            streams_per_connection: 900,
            wait: HOLD * 5,
        };
        let pool = Arc::new(PushPool::new(factory, settings));
        let started = tokio::time::Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..10 {
            let pool = pool.clone();
            tasks.spawn(async move {
                let (push, device) = push_and_device();
                let result = pool.send(&push, &device).await;
                (result, started.elapsed())
            });
        }
        let done = tasks.join_all().await;
        assert!(done.iter().all(|(r, _)| r.is_ok()), "{done:?}");
        assert_eq!(
            count(&on_second),
            9,
            "all but the first on the second connection"
        );
        assert_eq!(
            pool.hops(),
            4,
            "the four stuck on the first hopped once each"
        );
        let mut late: Vec<Duration> = done.iter().map(|(_, t)| *t).collect();
        late.sort();
        assert_eq!(late[8], HOP, "the hopped ones left after one hop: {late:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_push_given_up_on_frees_its_stream() {
        let (pool, counts) = pool(1, 1);
        let (push, device) = push_and_device();
        let gave_up = tokio::time::timeout(HOLD / 10, pool.send(&push, &device)).await;
        assert!(gave_up.is_err());
        let mut next = spawn_sends(&pool, 1);
        settle().await;
        assert_eq!(
            count(&counts.started),
            2,
            "started at once, on the freed stream"
        );
        assert!(next.join_next().await.unwrap().unwrap().is_ok());
    }
}
