//! What the real-time dispatch tests share: a device with a call due in a moment, stored
//! directly (the API takes reservations at least 10 s ahead), a short run's settings, and a run.

use std::time::Duration;

use chrono::{DateTime, FixedOffset, Utc};
use koe::domain::device::Device;
use koe::domain::reservation::{CallId, Reservation, ScheduledAt};
use koe::platform::config::{Config, DispatchConfig, Vars};
use koe::store::prelude::*;

use crate::push::device;

/// Registers the device `name` (a random token) and reserves its call `in_ms` from now.
pub async fn reserve_soon(store: &dyn Store, name: &str, in_ms: i64) -> Reservation {
    reserve_soon_as(store, name, in_ms, CallId::generate()).await
}

/// [`reserve_soon`] with the call id `call_id` (one that raises its minute's count, or not:
/// `koe::domain::due::raises_count`).
pub async fn reserve_soon_as(
    store: &dyn Store,
    name: &str,
    in_ms: i64,
    call_id: CallId,
) -> Reservation {
    let now = Utc::now();
    let at = (now + chrono::Duration::milliseconds(in_ms)).fixed_offset();
    let token = format!("{:064x}", fastrand::u128(..));
    reserve_for(store, &device(name, &token, now), at, None, now, call_id).await
}

/// Registers the device `name` with the VoIP token `token` and reserves its call at `at`,
/// both made at `made`.
pub async fn reserve_at<S: DeviceStore + ReservationStore + ?Sized>(
    store: &S,
    name: &str,
    token: &str,
    at: DateTime<FixedOffset>,
    made: DateTime<Utc>,
) -> Reservation {
    let device = device(name, token, made);
    reserve_for(store, &device, at, None, made, CallId::generate()).await
}

/// A crowd: `n` calls due at `at`, each to a device of its own (`<prefix>-0000`.., tokens
/// `1`..), made at `made`.
pub async fn crowd<S: DeviceStore + ReservationStore + ?Sized>(
    store: &S,
    prefix: &str,
    n: usize,
    at: DateTime<Utc>,
    made: DateTime<Utc>,
) -> Vec<Reservation> {
    let mut calls = Vec::with_capacity(n);
    for i in 0..n {
        let (name, token) = (format!("{prefix}-{i:04}"), format!("{:064x}", i + 1));
        calls.push(reserve_at(store, &name, &token, at.fixed_offset(), made).await);
    }
    calls
}

/// Stores `device` and reserves its call `call_id` at `at` (from `caller`), made at `made`,
/// straight into `store` (the API takes no call due in a moment).
pub async fn reserve_for<S: DeviceStore + ReservationStore + ?Sized>(
    store: &S,
    device: &Device,
    at: DateTime<FixedOffset>,
    caller: Option<String>,
    made: DateTime<Utc>,
    call_id: CallId,
) -> Reservation {
    store.put_device(device).await.expect("put_device");
    let at = ScheduledAt::from_stored(at);
    let mut r = Reservation::new(device.device_id.clone(), at, caller, made);
    r.call_id = call_id;
    store
        .create_reservation(&r, made, made - chrono::Duration::minutes(5))
        .await
        .expect("create_reservation");
    r
}

/// `r`'s reservation as `store` holds it now (by the wall clock).
pub async fn stored<S: ReservationStore + ?Sized>(store: &S, r: &Reservation) -> Reservation {
    let held = store.get_reservation(&r.device_id, Utc::now()).await;
    held.expect("get_reservation").expect("the reservation")
}

/// The deployed timing with a 3 s window re-selected every 500 ms, so a run takes seconds.
pub fn short_run() -> DispatchConfig {
    let mut settings = Config::from_vars(&Vars::from_pairs(&[]))
        .expect("defaults are valid")
        .dispatch;
    settings.window = Duration::from_secs(3);
    settings.reselect_every = Duration::from_millis(500);
    settings
}

/// A dispatcher on `store`, `push` and `clock` (each handle cloned), for the tests that start
/// one run after another, or several at once, on one world.
pub fn dispatcher_on<S, P, C>(
    store: &std::sync::Arc<S>,
    push: &std::sync::Arc<P>,
    clock: &std::sync::Arc<C>,
    settings: DispatchConfig,
    salt: &str,
) -> koe::dispatch::Dispatcher
where
    S: Store + 'static,
    P: koe::push::PushSender + 'static,
    C: koe::platform::clock::Clock + 'static,
{
    koe::dispatch::Dispatcher::new(store.clone(), push.clone(), clock.clone(), settings, salt)
}

/// One run on the wall clock (`RunCause::Local`), to its end.
pub async fn run_once(
    store: std::sync::Arc<dyn Store>,
    push: std::sync::Arc<dyn koe::push::PushSender>,
    settings: DispatchConfig,
) -> koe::dispatch::RunReport {
    koe::dispatch::Dispatcher::new(
        store,
        push,
        std::sync::Arc::new(koe::platform::clock::SystemClock),
        settings,
        "test-salt",
    )
    .run(koe::dispatch::RunCause::Local)
    .await
}

/// DynamoDB Local behind `reply_drop`'s proxy, with the production-like client (deployed
/// timeouts and retries; the dispatcher's own requests on a call made once each, as deployed),
/// fresh tables, and a recording push sender: the world of the tests that lose, refuse or hold
/// back the dispatcher's replies.
pub struct ProxiedWorld {
    pub store: std::sync::Arc<koe::store::dynamodb::DynamoStore>,
    pub dropper: crate::dynamodb::reply_drop::ReplyDropper,
    pub push: std::sync::Arc<crate::push::RecordingPushSender>,
    pub tables: koe::store::TableNames,
}

impl ProxiedWorld {
    pub async fn new() -> ProxiedWorld {
        let upstream = tokio::task::spawn_blocking(crate::dynamodb::endpoint)
            .await
            .unwrap();
        let dropper = crate::dynamodb::reply_drop::ReplyDropper::start(&upstream).await;
        let setup = crate::dynamodb::client().await;
        let tables =
            crate::dynamodb::create_tables(&setup, &crate::dynamodb::random_prefix()).await;
        let client = crate::dynamodb::production_like_client(&dropper.endpoint());
        ProxiedWorld {
            // The dispatcher's store, as the app's wiring hands it to the dispatcher.
            store: std::sync::Arc::new(
                koe::store::dynamodb::DynamoStore::new(client, tables.clone()).for_dispatcher(),
            ),
            dropper,
            push: std::sync::Arc::new(crate::push::RecordingPushSender::new(std::sync::Arc::new(
                koe::platform::clock::SystemClock,
            ))),
            tables,
        }
    }

    pub async fn reserve(&self, name: &str, in_ms: i64) -> Reservation {
        reserve_soon(self.store.as_ref(), name, in_ms).await
    }

    /// [`ProxiedWorld::reserve`] for a device that confirms its calls (`confirmsCalls`): its
    /// claim and its push mark are two writes.
    pub async fn reserve_confirming(&self, name: &str, in_ms: i64) -> Reservation {
        let r = self.reserve(name, in_ms).await;
        let now = Utc::now();
        let mut device = self
            .store
            .get_device(&r.device_id, now)
            .await
            .unwrap()
            .unwrap();
        device.confirms_calls = true;
        self.store.put_device(&device).await.expect("put_device");
        r
    }

    /// One run ([`short_run`], this claim timeout), to its end.
    pub async fn run(&self, claim_timeout: Duration) -> koe::dispatch::RunReport {
        let mut settings = short_run();
        settings.claim_timeout = claim_timeout;
        run_once(self.store.clone(), self.push.clone(), settings).await
    }

    pub async fn stored(&self, r: &Reservation) -> Reservation {
        self.store
            .get_reservation(&r.device_id, Utc::now())
            .await
            .unwrap()
            .expect("the reservation")
    }
}

/// A dispatch trigger that counts the runs requested and starts none (a test or bench invokes
/// its runs by hand).
#[derive(Default)]
pub struct CountingTrigger(std::sync::atomic::AtomicUsize);

impl CountingTrigger {
    /// The runs requested so far.
    pub fn count(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl koe::dispatch::trigger::DispatchTrigger for CountingTrigger {
    async fn request_run(&self) -> Result<(), koe::dispatch::trigger::TriggerError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}
