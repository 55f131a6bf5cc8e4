//! Every answer before its timeout (`koe::platform::deadline`), measured on the code's own runs instead of
//! counted by hand:
//! - every agent endpoint along its longest path with each store request as slow as the
//!   store's timeouts allow (a layer over both stores): each answers before its function's
//!   `Timeout` in the template (its route's `timeout`) with a contract answer, a 503 with
//!   `Retry-After` when time ran out; the store requests each path makes are counted here;
//! - DynamoDB Local in a brownout (every request's first sending answered past the SDK's 1 s
//!   attempt timeout, its retry in 0.85 s): the same, and a keyed create is a 201 that reads
//!   back and whose retry is the same reservation;
//! - a create stopped after each of its requests in turn (a function killed there) leaves no
//!   reservation that no run selects, on both stores (port by port) and on DynamoDB Local
//!   (request by request, through a proxy that lets nothing after that request through).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use koe::calls::api::{CancelCall, ConfirmCall, CreateCall, GetCall};
use koe::devices::api::PutDevice;
use koe::domain::device::DeviceId;
use koe::domain::due::shards_for;
use koe::domain::reservation::minute_bucket;
use koe::store::dynamodb::{DynamoStore, OPERATION_TIMEOUT};
use koe::store::memory::MemoryStore;
use koe::store::prelude::*;
use koe::store::{Store, StoreError};
use koe::{Endpoint, Route};
use koe_testkit::clock::ManualClock;
use koe_testkit::dispatching::ProxiedWorld;
use koe_testkit::harness::{TestApp, send_with_secret, spawn_app_with};
use serde_json::{Value, json};

const NOW: &str = "2035-03-01T00:00:00Z";

fn now() -> DateTime<Utc> {
    NOW.parse().unwrap()
}

/// `now` plus `secs`, as the app sends it.
fn at(secs: i64) -> String {
    (now() + chrono::Duration::seconds(secs)).to_rfc3339()
}

/// The DynamoDB requests each port request made on a run of the real adapter (most seen), by
/// the port method's name: counted from DynamoDB Local's side, through the proxy.
type Counted = Mutex<BTreeMap<&'static str, usize>>;

/// A store layer that, while counting, learns from `requests` (how many DynamoDB requests have
/// been made so far) how many each port request makes; while slow, makes each port request as
/// late as its DynamoDB requests can each be within the client's whole-operation timeout
/// (`delay` each; a port request never counted is one request). Every port request made while
/// slow is listed.
struct Slow {
    inner: Arc<dyn Store>,
    delay: Duration,
    slow: AtomicBool,
    requests: Option<Box<dyn Fn() -> usize + Send + Sync>>,
    counted: Arc<Counted>,
    made: Mutex<Vec<&'static str>>,
    /// While counting, one port request at a time (the paths run at once).
    one_at_a_time: tokio::sync::Mutex<()>,
}

koe_testkit::store_layer!(Slow, |this, op, call| {
    if this.slow.load(Ordering::SeqCst) {
        this.made.lock().unwrap().push(op.name());
        let requests = this.counted.lock().unwrap().get(op.name()).copied();
        tokio::time::sleep(this.delay * requests.unwrap_or(1).max(1) as u32).await;
        return call().await;
    }
    let Some(requests) = &this.requests else {
        return call().await;
    };
    let _alone = this.one_at_a_time.lock().await;
    let before = requests();
    let answer = call().await;
    let made = requests() - before;
    let mut counted = this.counted.lock().unwrap();
    let most = counted.entry(op.name()).or_insert(0);
    *most = (*most).max(made);
    answer
});

/// A store that answers the next `left` requests, then refuses every later one without making
/// it: what the store sees of a process stopped after that request.
struct StopAfter {
    inner: Arc<dyn Store>,
    left: AtomicUsize,
}

koe_testkit::store_layer!(StopAfter, |this, _, call| {
    let go_on = this
        .left
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if !go_on {
        return Err(StoreError::new("the process stopped (test)").into());
    }
    call().await
});

/// One request and how it was answered.
struct Answered {
    route: Route,
    took: Duration,
    status: u16,
    body: Value,
    retry_after: bool,
}

impl Answered {
    /// A contract answer: a success or refusal the endpoint gives, or the deadline's 503 with
    /// `Retry-After`, never a 5xx of another kind. How long it took is printed, not asserted: a
    /// busy machine adds to it what no code can take back (the deadline itself is held to its
    /// timeout on paused time, in `koe::platform::deadline`'s tests); the test would then fail
    /// for the machine, not the code.
    fn holds(&self) {
        let what = format!("{} {}", self.route.method, self.route.path);
        if self.status >= 500 {
            assert_eq!(self.status, 503, "{what}: {}", self.body);
            assert_eq!(self.body["code"], "SERVICE_UNAVAILABLE", "{what}");
            assert!(self.retry_after, "{what}: a 503 carries Retry-After");
        }
    }
}

async fn answered<E: Endpoint>(request: reqwest::RequestBuilder, secret: &str) -> Answered {
    let started = Instant::now();
    let response = send_with_secret(request, Some(secret)).await;
    let took = started.elapsed();
    let status = response.status().as_u16();
    let retry_after = response.headers().contains_key("retry-after");
    let body = response.json().await.unwrap_or(Value::Null);
    Answered {
        route: E::ROUTE,
        took,
        status,
        body,
        retry_after,
    }
}

/// A registered device with its secret proven, and its reservation due `due_in` seconds ahead
/// (made with `key`): the state each endpoint's longest path starts from.
async fn device_with_call(app: &TestApp, device: &str, due_in: i64, key: &str) -> (String, Value) {
    let token = "ab".repeat(32);
    let secret = app.register_proven_device(device, &token).await;
    let body = json!({"deviceId": device, "scheduledAt": at(due_in), "callerName": "Koe"});
    let made = send_with_secret(
        app.agent(http::Method::POST, "/calls")
            .header("Idempotency-Key", key)
            .body(body.to_string()),
        Some(&secret),
    )
    .await;
    assert_eq!(made.status().as_u16(), 201, "setup: POST /calls");
    let made: Value = made.json().await.unwrap();
    (secret, made)
}

/// Every agent endpoint that touches the store, each along its longest path, at once (each on
/// its own device): a keyed create of a call due soon (device proof, kept answer, tombstone,
/// count, put, wake, kept answer), its retry, a read, a confirmation, a cancel by `callId`, a
/// registration presenting its secret.
async fn every_endpoint(app: &TestApp, label: &str, slow_down: impl Fn(bool)) -> Vec<Answered> {
    let tag = format!("{label}-{:08x}", fastrand::u32(..));
    let token = "cd".repeat(32);
    let create_device = format!("slow-create-{tag}");
    let create_secret = app.register_proven_device(&create_device, &token).await;
    let (get_secret, _) = device_with_call(app, &format!("slow-get-{tag}"), 600, "k-get").await;
    let (confirm_secret, confirm_call) =
        device_with_call(app, &format!("slow-confirm-{tag}"), 600, "k-confirm").await;
    let (cancel_secret, cancel_call) =
        device_with_call(app, &format!("slow-cancel-{tag}"), 600, "k-cancel").await;
    let put_device = format!("slow-put-{tag}");
    let put_secret = app.register_proven_device(&put_device, &token).await;
    slow_down(true);

    let create_body = json!({"deviceId": create_device, "scheduledAt": at(15)});
    let create = || {
        app.agent(http::Method::POST, "/calls")
            .header("Idempotency-Key", format!("k-create-{tag}"))
            .body(create_body.to_string())
    };
    let get_device = format!("slow-get-{tag}");
    let confirm_device = format!("slow-confirm-{tag}");
    let cancel_device = format!("slow-cancel-{tag}");
    let (created, got, confirmed, cancelled, put) = tokio::join!(
        answered::<CreateCall>(create(), &create_secret),
        answered::<GetCall>(
            app.agent(http::Method::GET, &format!("/calls?deviceId={get_device}")),
            &get_secret,
        ),
        answered::<ConfirmCall>(
            app.agent(http::Method::POST, "/calls/confirm").body(
                json!({"deviceId": confirm_device, "callId": confirm_call["callId"]}).to_string()
            ),
            &confirm_secret,
        ),
        answered::<CancelCall>(
            app.agent(
                http::Method::DELETE,
                &format!(
                    "/calls?deviceId={cancel_device}&callId={}",
                    cancel_call["callId"].as_str().unwrap()
                ),
            ),
            &cancel_secret,
        ),
        answered::<PutDevice>(
            app.agent(http::Method::PUT, "/devices")
                .body(json!({"deviceId": put_device, "voipToken": token}).to_string()),
            &put_secret,
        ),
    );
    let retried = answered::<CreateCall>(create(), &create_secret).await;
    slow_down(false);
    vec![created, retried, got, confirmed, cancelled, put]
}

fn slow_over(inner: Arc<dyn Store>, delay: Duration, counted: Arc<Counted>) -> Arc<Slow> {
    Arc::new(Slow {
        inner,
        delay,
        slow: AtomicBool::new(false),
        requests: None,
        counted,
        made: Mutex::new(Vec::new()),
        one_at_a_time: tokio::sync::Mutex::new(()),
    })
}

/// Each store request as slow as the DynamoDB client's whole-operation timeout allows (just
/// under it) for each DynamoDB request it makes, counted on a run of the real adapter first
/// (DynamoDB Local through the proxy, at full speed): every endpoint still answers before its
/// timeout, the keyed create (whose requests outlast its deadline) cut at its deadline. Then
/// the in-memory store, as slow per port request as DynamoDB's.
#[tokio::test]
async fn a_store_as_slow_as_its_timeouts_allow_costs_no_answer() {
    let world = ProxiedWorld::new().await;
    let counted = Arc::new(Counted::default());
    let delay = OPERATION_TIMEOUT - Duration::from_millis(100);
    let proxy = Arc::new(world.dropper);
    let requests = proxy.clone();
    let dynamodb = Arc::new(Slow {
        requests: Some(Box::new(move || requests.operations().len())),
        ..Arc::into_inner(slow_over(world.store.clone(), delay, counted.clone())).unwrap()
    });
    let memory = slow_over(Arc::new(MemoryStore::new()), delay, counted.clone());
    for (slow, label) in [(dynamodb, "dynamodb"), (memory, "memory")] {
        let clock = Arc::new(ManualClock::at_rfc3339(NOW));
        let store: Arc<dyn Store> = slow.clone();
        let app = spawn_app_with(&[], |app| app.with_clock(clock).with_store(store)).await;
        if label == "dynamodb" {
            // Each path once at full speed: the DynamoDB requests of each port request.
            every_endpoint(&app, "count", |_| {}).await;
            eprintln!(
                "DynamoDB requests per port request: {:?}",
                counted.lock().unwrap()
            );
        }
        let answers = every_endpoint(&app, label, |on| slow.slow.store(on, Ordering::SeqCst)).await;
        for a in &answers {
            eprintln!(
                "{label}: {} {} answered {} in {:?} (timeout {:?})",
                a.route.method, a.route.path, a.status, a.took, a.route.timeout
            );
            a.holds();
        }
        eprintln!(
            "{label}: port requests made by the six paths: {:?}",
            slow.made.lock().unwrap()
        );
        // The keyed create's requests outlast its deadline: it was cut there (its last step,
        // keeping the answer, given up: the 201 stands), not at its timeout.
        let create = &answers[0];
        let cut_at = create.route.timeout
            - koe::platform::deadline::MARGIN
            - koe::platform::deadline::ANSWER_RESERVE;
        assert!(
            create.took >= cut_at - Duration::from_millis(300),
            "{label}: the create ran into its deadline ({cut_at:?}): {:?}",
            create.took
        );
    }
    let create = counted.lock().unwrap().get("CreateReservation").copied();
    assert!(
        create >= Some(2),
        "a create's put and count are counted: {create:?}"
    );
}

/// The brownout of the issue that found the counted budgets wrong: DynamoDB Local behind a proxy
/// that answers every request's first sending 1.1 s late (past the SDK's 1 s attempt
/// timeout) and its retry 0.85 s late, every write carried out. Every endpoint answers before
/// its timeout; the keyed create is a 201 that reads back, and its retry the same reservation.
#[tokio::test]
async fn in_a_dynamodb_brownout_every_endpoint_answers_before_its_timeout() {
    let world = ProxiedWorld::new().await;
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let store: Arc<dyn Store> = world.store.clone();
    let app = spawn_app_with(&[], |app| app.with_clock(clock).with_store(store)).await;
    let before = Mutex::new(0);
    let answers = every_endpoint(&app, "brownout", |on| {
        if on {
            *before.lock().unwrap() = world.dropper.operations().len();
            world
                .dropper
                .brownout(Duration::from_millis(1100), Duration::from_millis(850));
        } else {
            world.dropper.clear();
        }
    })
    .await;
    let before = *before.lock().unwrap();
    for a in &answers {
        eprintln!(
            "brownout: {} {} answered {} in {:?} (timeout {:?})",
            a.route.method, a.route.path, a.status, a.took, a.route.timeout
        );
        a.holds();
    }
    let requests = world.dropper.operations().len() - before;
    eprintln!("brownout: {requests} DynamoDB requests (SDK retries included)");
    let (created, retried) = (&answers[0], &answers[1]);
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(retried.status, 201, "{}", retried.body);
    assert_eq!(
        retried.body["callId"], created.body["callId"],
        "the same one"
    );
    world.dropper.clear();
    let device = created.body["deviceId"].as_str().unwrap();
    let stored = world
        .store
        .get_reservation(&DeviceId::parse("deviceId", device).unwrap(), now())
        .await
        .unwrap()
        .expect("the 201's reservation reads back");
    assert_eq!(stored.call_id.as_str(), created.body["callId"]);
}

/// Whether a run at the reservation's time selects it: it is in shard 0 or in one its minute's
/// count covers (what every run's selection queries).
async fn a_run_selects(store: &dyn Store, id: &DeviceId) -> Option<bool> {
    let r = store.get_reservation(id, now()).await.unwrap()?;
    let minute = minute_bucket(r.scheduled_at.utc());
    let count = store.due_count(&minute).await.unwrap();
    for shard in 0..shards_for(count) {
        let due = store.due_calls(&minute, shard).await.unwrap();
        if due.iter().any(|c| c.call_id == r.call_id) {
            return Some(true);
        }
    }
    Some(false)
}

/// POST /calls (keyed, due soon: its wake claimed, its answer kept) with the store stopped after
/// its `n`th request (`stop_after`; `requests_made` counts them, port or DynamoDB requests), for
/// every `n` the full create makes: the reservation is then absent, or a run selects it.
async fn a_create_stopped_after_each_request(
    app_store: Arc<dyn Store>,
    store: Arc<dyn Store>,
    stop_after: impl Fn(usize),
    requests_made: impl Fn() -> usize,
    label: &str,
) {
    let clock = Arc::new(ManualClock::at_rfc3339(NOW));
    let app = spawn_app_with(&[], |app| app.with_clock(clock).with_store(app_store)).await;
    let token = "ef".repeat(32);
    let mut n = 0;
    loop {
        // A minute of its own (its first create) and one shared with others, in turn.
        let device = format!("stopped-{label}-{n}-{:08x}", fastrand::u32(..));
        let secret = app.register_proven_device(&device, &token).await;
        let due_in = if n % 2 == 0 { 45 + 60 * (n as i64) } else { 45 };
        let body = json!({"deviceId": device, "scheduledAt": at(due_in)});
        let before = requests_made();
        stop_after(n);
        let answer = send_with_secret(
            app.agent(http::Method::POST, "/calls")
                .header("Idempotency-Key", format!("stop-{n}"))
                .body(body.to_string()),
            Some(&secret),
        )
        .await;
        stop_after(usize::MAX);
        let status = answer.status().as_u16();
        let id = DeviceId::parse("deviceId", &device).unwrap();
        match a_run_selects(store.as_ref(), &id).await {
            None => eprintln!("{label}: stopped after {n}: {status}, no reservation"),
            Some(selected) => {
                assert!(
                    selected,
                    "{label}: stopped after request {n} ({status}): a reservation no run selects"
                );
                eprintln!("{label}: stopped after {n}: {status}, reservation selected");
            }
        }
        let made = requests_made() - before;
        if status == 201 && made <= n {
            assert!(n > 0);
            eprintln!("{label}: a whole create makes {made} requests");
            break;
        }
        n += 1;
        assert!(n < 40, "{label}: a create of more than 40 requests");
    }
}

#[tokio::test]
async fn a_create_stopped_after_each_port_request_leaves_no_call_no_run_selects() {
    for (inner, label) in [
        (
            Arc::new(MemoryStore::new()) as Arc<dyn Store>,
            "memory-port",
        ),
        (
            Arc::new(koe_testkit::dynamodb::fresh_store().await) as Arc<dyn Store>,
            "dynamodb-port",
        ),
    ] {
        let stop = Arc::new(StopAfter {
            inner: inner.clone(),
            left: AtomicUsize::new(usize::MAX),
        });
        let counted = slow_over(stop.clone(), Duration::ZERO, Default::default());
        counted.slow.store(true, Ordering::SeqCst);
        let made = counted.clone();
        a_create_stopped_after_each_request(
            counted,
            inner,
            |n| stop.left.store(n, Ordering::SeqCst),
            move || made.made.lock().unwrap().len(),
            label,
        )
        .await;
    }
}

#[tokio::test]
async fn a_create_stopped_after_each_dynamodb_request_leaves_no_call_no_run_selects() {
    let world = ProxiedWorld::new().await;
    let direct = DynamoStore::new(koe_testkit::dynamodb::client().await, world.tables.clone());
    let direct: Arc<dyn Store> = Arc::new(direct);
    let proxied: Arc<dyn Store> = world.store.clone();
    // The app on the proxied store; the checks read DynamoDB Local directly.
    a_create_stopped_after_each_request(
        proxied,
        direct,
        |n| world.dropper.stop_after(n),
        || world.dropper.operations().len(),
        "dynamodb-requests",
    )
    .await;
}
