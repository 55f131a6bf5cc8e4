//! A minute's count inflated straight in the table (issue 29): on DynamoDB Local, 10,000 added
//! to `due#<minute>` makes every selection of that minute query its 313 shards, but a run never
//! has more than `SELECTION_QUERIES_IN_FLIGHT` selection requests out at once, and the calls
//! due meanwhile, in that minute and the next, still leave within 1 s of their second.
//!
//! The run is on the wall clock shifted to 2035 (`TokioClock`, not paused): it starts at
//! 00:00:52, its window (12 s, re-selected every 2 s, so the crowd is queried six times over)
//! covers the inflated minute 00:00 and the next. The store is wrapped in a layer that counts
//! the selection's requests in flight. The figures are printed (`--nocapture`) for
//! docs/scale.md, "An inflated count".

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant};

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Duration, Utc};
use koe::clock::Clock;
use koe::config::{Config, Vars};
use koe::dispatch::{Dispatcher, RunCause, SELECTION_QUERIES_IN_FLIGHT};
use koe::domain::device::{Device, DeviceId, PushEnvironment, VoipToken};
use koe::domain::due::{DueCall, shards_for};
use koe::domain::reservation::{CallId, Reservation, RunToken, ScheduledAt, minute_bucket};
use koe::store::dynamodb::DynamoStore;
use koe::store::{
    CancelError, ClaimAnswer, CreateError, Created, DeviceProof, DeviceWrite, IdempotentAnswer,
    Outcome, SpendOutcome, Store, StoreError, UsageOutcome,
};
use koe_testkit::clock::TokioClock;
use koe_testkit::dynamodb::{client, create_tables, random_prefix};
use koe_testkit::push::RecordingPushSender;

/// How much the count is inflated by: 10,000, or `KOE_BENCH_INFLATE_BY` (bench/inflated-count.sh
/// runs it with 1,000,000 too: the ceiling's 5,000 shards).
fn inflated_by() -> u32 {
    std::env::var("KOE_BENCH_INFLATE_BY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inflated_minute_is_queried_a_bounded_number_at_once_and_delays_no_call() {
    let client = client().await;
    let tables = create_tables(&client, &random_prefix()).await;
    let dynamo: Arc<dyn Store> = Arc::new(DynamoStore::new(client.clone(), tables.clone()));
    let inflated_by = inflated_by();
    let store = Arc::new(Counted::new(dynamo));
    let clock = Arc::new(TokioClock::at(t("2035-03-01T00:00:52Z")));

    let crowded = minute_bucket(t("2035-03-01T00:00:00Z"));
    let in_crowd = reserve(
        &store,
        clock.as_ref(),
        "inflated-same",
        "2035-03-01T00:00:58Z",
    )
    .await;
    let next = reserve(
        &store,
        clock.as_ref(),
        "inflated-next",
        "2035-03-01T00:01:00.500Z",
    )
    .await;
    client
        .update_item()
        .table_name(&tables.calls)
        .key("deviceId", AttributeValue::S(format!("due#{crowded}")))
        .update_expression("ADD #count :n")
        .expression_attribute_names("#count", "count")
        .expression_attribute_values(":n", AttributeValue::N(inflated_by.to_string()))
        .send()
        .await
        .expect("inflate the count");
    let count = store.due_count(&crowded).await.unwrap();
    assert_eq!(count, inflated_by + 1);
    let shards = shards_for(count);
    store.crowd_shards.store(shards as usize, Ordering::SeqCst);
    if inflated_by == 10_000 {
        assert_eq!(shards, 313);
    }

    let mut settings = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    settings.window = StdDuration::from_secs(12);
    settings.reselect_every = StdDuration::from_secs(2);
    let push = Arc::new(RecordingPushSender::new(clock.clone()));
    let store_port: Arc<dyn Store> = store.clone();
    let dispatcher = Dispatcher::new(store_port, push.clone(), clock.clone(), settings, "salt");
    let started = Instant::now();
    let report = dispatcher.run(RunCause::Local).await;

    let most = store.most.load(Ordering::SeqCst);
    let first_selection = store
        .crowd_done
        .lock()
        .unwrap()
        .expect("the crowd was queried")
        - started;
    let crowd_queries = store.crowd_queries.load(Ordering::SeqCst);
    // How late each call's one push left (`None`: not pushed exactly once).
    let late = |r: &Reservation| {
        let sent = push.sent_for_call(r.call_id.as_str());
        (sent.len() == 1).then(|| (sent[0].at - r.scheduled_at.utc()).num_milliseconds())
    };
    let (late_same, late_next) = (late(&in_crowd), late(&next));
    println!(
        "inflated minute (count {count}, {shards} shards): first selection {} ms, \
         {crowd_queries} of its shard queries in the run, at most {most} selection requests in \
         flight (limit {}); lateness: same minute {late_same:?} ms, next minute {late_next:?} ms",
        first_selection.as_millis(),
        SELECTION_QUERIES_IN_FLIGHT,
    );
    assert!(most <= SELECTION_QUERIES_IN_FLIGHT, "{most} in flight");
    assert!(
        crowd_queries >= shards as usize,
        "the crowd was queried whole at least once"
    );
    for (which, late) in [("same", late_same), ("next", late_next)] {
        let late = late.unwrap_or_else(|| panic!("{which} minute's call not pushed once"));
        assert!(
            (0..1_000).contains(&late),
            "{which} minute's call {late} ms late"
        );
    }
    assert_eq!((report.sent, report.store_errors), (2, 0), "{report:?}");
}

async fn reserve(store: &Counted, clock: &dyn Clock, name: &str, at: &str) -> Reservation {
    let device = Device {
        device_id: DeviceId::parse("deviceId", name).unwrap(),
        voip_token: VoipToken::parse("voipToken", &format!("{:064x}", fastrand::u128(..))).unwrap(),
        environment: PushEnvironment::Production,
        updated_at: clock.now(),
        confirms_calls: false,
    };
    store.put_device(&device).await.unwrap();
    let at = DateTime::parse_from_rfc3339(at).unwrap();
    let r = Reservation::new(
        device.device_id,
        ScheduledAt::from_stored(at),
        None,
        clock.now(),
    );
    let now = clock.now();
    store
        .create_reservation(&r, now, now - Duration::seconds(150))
        .await
        .unwrap();
    r
}

/// The store, counting the selection's requests (`due_count`, `due_calls`) in flight, the most
/// at once, and when the crowded minute's shards were first all answered.
struct Counted {
    inner: Arc<dyn Store>,
    in_flight: AtomicUsize,
    most: AtomicUsize,
    crowd_queries: AtomicUsize,
    /// The crowded minute's shards: its first selection is done when this many have answered.
    crowd_shards: AtomicUsize,
    crowd_done: Mutex<Option<Instant>>,
}

impl Counted {
    fn new(inner: Arc<dyn Store>) -> Counted {
        Counted {
            inner,
            in_flight: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            crowd_queries: AtomicUsize::new(0),
            crowd_shards: AtomicUsize::new(usize::MAX),
            crowd_done: Mutex::new(None),
        }
    }

    async fn selecting<T>(&self, request: impl std::future::Future<Output = T>) -> T {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let answer = request.await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        answer
    }
}

#[async_trait]
impl Store for Counted {
    async fn due_count(&self, minute: &str) -> Result<u32, StoreError> {
        self.selecting(self.inner.due_count(minute)).await
    }

    async fn due_calls(&self, minute: &str, shard: u32) -> Result<Vec<DueCall>, StoreError> {
        let answer = self.selecting(self.inner.due_calls(minute, shard)).await;
        if minute.ends_with("T00:00Z") {
            let done = self.crowd_queries.fetch_add(1, Ordering::SeqCst) + 1;
            if done == self.crowd_shards.load(Ordering::SeqCst) {
                *self.crowd_done.lock().unwrap() = Some(Instant::now());
            }
        }
        answer
    }

    async fn put_device(&self, device: &Device) -> Result<(), StoreError> {
        self.inner.put_device(device).await
    }

    async fn register_device(
        &self,
        device: &Device,
        presented: Option<&str>,
        new_secret_hash: &str,
    ) -> Result<DeviceWrite, StoreError> {
        self.inner
            .register_device(device, presented, new_secret_hash)
            .await
    }

    async fn get_device(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<Option<Device>, StoreError> {
        self.inner.get_device(id, now).await
    }

    async fn device_proof(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<DeviceProof, StoreError> {
        self.inner.device_proof(id, now).await
    }

    async fn prove_device(
        &self,
        id: &DeviceId,
        secret_hash: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.inner.prove_device(id, secret_hash, now).await
    }

    async fn was_cancelled(
        &self,
        call_id: &CallId,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.inner.was_cancelled(call_id, now).await
    }

    async fn remove_device(&self, id: &DeviceId, token: &VoipToken) -> Result<bool, StoreError> {
        self.inner.remove_device(id, token).await
    }

    async fn create_reservation(
        &self,
        reservation: &Reservation,
        now: DateTime<Utc>,
        stale_before: DateTime<Utc>,
    ) -> Result<Created, CreateError> {
        self.inner
            .create_reservation(reservation, now, stale_before)
            .await
    }

    async fn get_reservation(
        &self,
        id: &DeviceId,
        now: DateTime<Utc>,
    ) -> Result<Option<Reservation>, StoreError> {
        self.inner.get_reservation(id, now).await
    }

    async fn cancel_reservation(
        &self,
        id: &DeviceId,
        call_id: Option<&CallId>,
        now: DateTime<Utc>,
    ) -> Result<(), CancelError> {
        self.inner.cancel_reservation(id, call_id, now).await
    }

    async fn claim_due(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
        abandoned_before: DateTime<Utc>,
    ) -> Result<ClaimAnswer, StoreError> {
        self.inner
            .claim_due(id, call_id, run, now, abandoned_before)
            .await
    }

    async fn mark_push_started(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
        confirms: bool,
    ) -> Result<bool, StoreError> {
        self.inner
            .mark_push_started(id, call_id, run, now, confirms)
            .await
    }

    async fn release_claim(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        run: &RunToken,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.inner.release_claim(id, call_id, run, now).await
    }

    async fn finish_reservation(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        outcome: Outcome,
        run: &RunToken,
        now: DateTime<Utc>,
        abandoned_before: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.inner
            .finish_reservation(id, call_id, outcome, run, now, abandoned_before)
            .await
    }

    async fn confirm_call(
        &self,
        id: &DeviceId,
        call_id: &CallId,
        now: DateTime<Utc>,
    ) -> Result<koe::store::ConfirmAnswer, StoreError> {
        self.inner.confirm_call(id, call_id, now).await
    }

    async fn count_agent_use(
        &self,
        id: &DeviceId,
        day: &str,
        limit: u32,
        expire_at: i64,
    ) -> Result<UsageOutcome, StoreError> {
        self.inner.count_agent_use(id, day, limit, expire_at).await
    }

    async fn count_plan_answer(
        &self,
        plan_id: &str,
        limit: u32,
        expire_at: i64,
    ) -> Result<UsageOutcome, StoreError> {
        self.inner
            .count_plan_answer(plan_id, limit, expire_at)
            .await
    }

    async fn reserve_tokens(
        &self,
        api: &str,
        day: &str,
        tokens: u64,
        ceiling: u64,
        expire_at: i64,
    ) -> Result<SpendOutcome, StoreError> {
        self.inner
            .reserve_tokens(api, day, tokens, ceiling, expire_at)
            .await
    }

    async fn settle_tokens(
        &self,
        api: &str,
        day: &str,
        delta: i64,
        expire_at: i64,
    ) -> Result<(), StoreError> {
        self.inner.settle_tokens(api, day, delta, expire_at).await
    }

    async fn claim_ceiling_notice(
        &self,
        api: &str,
        day: &str,
        expire_at: i64,
    ) -> Result<bool, StoreError> {
        self.inner.claim_ceiling_notice(api, day, expire_at).await
    }

    async fn idempotent_answer(
        &self,
        key: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<IdempotentAnswer>, StoreError> {
        self.inner.idempotent_answer(key, now).await
    }

    async fn keep_idempotent_answer(
        &self,
        answer: &IdempotentAnswer,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.inner.keep_idempotent_answer(answer, now).await
    }
}
