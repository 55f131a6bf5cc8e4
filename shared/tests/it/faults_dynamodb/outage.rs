//! DynamoDB stopped mid-test, restarted on the same port with its data: answers during and after.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use koe::dispatch::{Dispatcher, RunCause};
use koe::platform::clock::SystemClock;
use koe::platform::config::{Config, Vars};
use koe::store::dynamodb::DynamoStore;
use koe::store::prelude::*;
use koe_testkit::dynamodb::{self, DynamoDbLocal};
use koe_testkit::faults;
use koe_testkit::harness::{error_body, header, spawn_app_with};
use koe_testkit::openai::Behaviour;
use koe_testkit::push::RecordingPushSender;
use serde_json::{Value, json};

use super::{
    DAILY_LIMIT, agent_round1, assert_every_item_whole, delete_call, device_id, expect_503,
    get_call, post_call, put_device, timed, token,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_stopped_mid_test_then_restarted_on_the_same_port() {
    let ddb = DynamoDbLocal::on_disk().await;
    let client = dynamodb::production_like_client(&ddb.endpoint);
    let tables = dynamodb::create_tables(&client, &dynamodb::random_prefix()).await;
    let store = Arc::new(DynamoStore::new(client, tables));
    let limit = DAILY_LIMIT.to_string();
    let app_store = store.clone();
    let app = spawn_app_with(&[("AGENT_DAILY_LIMIT", &limit)], move |app| {
        app.with_store(app_store)
    })
    .await;
    app.openai.set_default(Behaviour::schema_valid());

    // ---- Before: a device with a reservation, a device without, one counted agent call.
    assert_eq!(put_device(&app, "ddb-a", 1).await.status().as_u16(), 200);
    assert_eq!(put_device(&app, "ddb-c", 3).await.status().as_u16(), 200);
    let created = post_call(&app, "ddb-a").await;
    assert_eq!(created.status().as_u16(), 201);
    let reservation: Value = created.json().await.unwrap();
    let response = agent_round1(&app, "ddb-a").await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        header(&response, "x-ratelimit-remaining").as_deref(),
        Some((DAILY_LIMIT - 1).to_string().as_str())
    );

    // ---- DynamoDB dies while registrations keep coming in.
    let stop_writing = Arc::new(AtomicBool::new(false));
    let writer = {
        let (client, url, stop) = (
            app.client.clone(),
            app.agent_url.clone(),
            stop_writing.clone(),
        );
        tokio::spawn(async move {
            // Until DynamoDB is stopped and one registration has met the outage (bounded).
            let mut answers: Vec<(String, u16)> = Vec::new();
            let mut n = 0;
            while n < 2000
                && !(stop.load(Ordering::SeqCst) && answers.iter().any(|(_, s)| *s != 200))
            {
                n += 1;
                let id = format!("inflight-{n}");
                let status = client
                    .put(format!("{url}/devices"))
                    .header("x-api-key", koe_testkit::harness::TEST_API_KEY)
                    .body(json!({"deviceId": id, "voipToken": token(100 + n)}).to_string())
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0);
                answers.push((id, status));
            }
            answers
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    ddb.stop().await;
    stop_writing.store(true, Ordering::SeqCst);
    let inflight = writer.await.unwrap();
    let ok = inflight.iter().filter(|(_, s)| *s == 200).count();
    let unavailable = inflight.iter().filter(|(_, s)| *s == 503).count();
    assert_eq!(
        ok + unavailable,
        inflight.len(),
        "every in-flight registration is 200 or 503: {inflight:?}"
    );
    assert!(
        ok > 0 && unavailable > 0,
        "some before, some during: {inflight:?}"
    );

    // ---- During the outage: each endpoint's answer, and a dispatcher run, all at once.
    let notifications = app.events.published().len();
    let push = Arc::new(RecordingPushSender::new(Arc::new(SystemClock)));
    let mut settings = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    settings.window = Duration::from_secs(1);
    settings.reselect_every = Duration::from_millis(300);
    let dispatcher = Dispatcher::new(
        store.clone(),
        push.clone(),
        Arc::new(SystemClock),
        settings,
        "salt",
    );
    let (put, post, get, delete, agent, report) = tokio::join!(
        timed(put_device(&app, "ddb-b", 2)),
        timed(post_call(&app, "ddb-c")),
        timed(get_call(&app, "ddb-a")),
        timed(delete_call(&app, "ddb-a")),
        timed(agent_round1(&app, "ddb-a")),
        // Its first selection queries 8 or 9 minute buckets (grace + 5 min back) one after
        // another, each failing within the 3 s operation timeout (retries with random
        // backoff): at most 27 s, usually about half.
        tokio::time::timeout(Duration::from_secs(30), dispatcher.run(RunCause::Local)),
    );
    expect_503("PUT /devices", put).await;
    expect_503("POST /calls", post).await;
    expect_503("GET /calls", get).await;
    expect_503("DELETE /calls", delete).await;
    let published = app.events.published();
    assert_eq!(
        published.len(),
        notifications + 4,
        "one notification per 503"
    );
    assert!(
        published[notifications..]
            .iter()
            .all(|n| n.code == "SERVICE_UNAVAILABLE" && n.status == 503),
        "{published:?}"
    );

    // The daily limit fails open: answered, not counted, no Remaining header, not notified.
    let (took, response) = agent;
    assert_eq!(response.status().as_u16(), 200, "fail-open");
    assert_eq!(
        header(&response, "x-ratelimit-limit").as_deref(),
        Some(limit.as_str())
    );
    assert_eq!(header(&response, "x-ratelimit-remaining"), None);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "plan", "{body}");
    faults::record(
        "DynamoDB: down during POST /agent round 1",
        "daily limit fails open: 200, not counted, no X-RateLimit-Remaining",
        &format!(
            "200 plan in {} ms, X-RateLimit-Limit {limit}, no X-RateLimit-Remaining",
            took.as_millis()
        ),
    );

    // The dispatcher run: ends on time, counts the errors, claims and sends nothing.
    let report = report.expect("the run ends while DynamoDB is down");
    assert!(report.store_errors > 0, "{report:?}");
    assert_eq!((report.claimed, report.sent), (0, 0), "{report:?}");
    assert!(push.attempts().is_empty());
    faults::record(
        "DynamoDB: down during a dispatch run",
        "run ends, counts store errors, claims and sends nothing",
        &format!(
            "run ended; {} store errors, 0 claimed, 0 pushes",
            report.store_errors
        ),
    );

    // ---- DynamoDB comes back on the same port with its data; the server keeps its client.
    let restarted = Instant::now();
    ddb.restart().await;
    let mut recovered_after = None;
    for _ in 0..50 {
        let response = get_call(&app, "ddb-a").await;
        if response.status().as_u16() == 200 {
            let after: Value = response.json().await.unwrap();
            assert_eq!(
                after["callId"], reservation["callId"],
                "the same reservation"
            );
            assert_eq!(
                after["status"], "scheduled",
                "the cancel refused during the outage did not happen"
            );
            recovered_after = Some(restarted.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let recovered_after = recovered_after.expect("the server recovers once DynamoDB is back");
    // The polls before it may have met a DynamoDB Local still starting (a busy machine's JVM):
    // a 503 each, notified; none after.
    let recovered = app.events.published();
    assert!(
        recovered[notifications + 4..]
            .iter()
            .all(|n| n.code == "SERVICE_UNAVAILABLE" && n.status == 503),
        "{recovered:?}"
    );

    // Nothing refused during the outage was written...
    assert_eq!(
        store
            .get_device(&device_id("ddb-b"), chrono::Utc::now())
            .await
            .unwrap(),
        None
    );
    error_body(get_call(&app, "ddb-c").await, 404, "NOT_FOUND").await;
    // ...every registration answered 200 is there...
    for (id, status) in &inflight {
        let stored = store
            .get_device(&device_id(id), chrono::Utc::now())
            .await
            .unwrap();
        if *status == 200 {
            assert!(stored.is_some(), "{id} was answered 200 and is durable");
        }
    }
    // ...and every item reads back whole.
    let items = assert_every_item_whole(&ddb, &store).await;

    // The counter counts again, from where it was: the outage call was not counted.
    let response = agent_round1(&app, "ddb-a").await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        header(&response, "x-ratelimit-remaining").as_deref(),
        Some((DAILY_LIMIT - 2).to_string().as_str())
    );
    // And every endpoint works again.
    assert_eq!(put_device(&app, "ddb-b", 2).await.status().as_u16(), 200);
    assert_eq!(post_call(&app, "ddb-c").await.status().as_u16(), 201);
    assert_eq!(delete_call(&app, "ddb-a").await.status().as_u16(), 204);
    assert_eq!(
        app.events.published().len(),
        recovered.len(),
        "no 5xx after the recovery: {:?}",
        app.events.published()
    );

    faults::record(
        "DynamoDB: killed with registrations in flight",
        "each answered 200 or 503; every 200 durable; no partial item",
        &format!(
            "{} requests: {ok} x 200 (all durable), {unavailable} x 503; {items} items all whole",
            inflight.len()
        ),
    );
    faults::record(
        "DynamoDB: restarted on the same port",
        "same server recovers without a restart; data from before intact; outage writes absent",
        &format!(
            "recovered {} ms after the restart began; reservation still scheduled; \
             counter resumed at {}; refused writes absent",
            recovered_after.as_millis(),
            DAILY_LIMIT - 2
        ),
    );
}
