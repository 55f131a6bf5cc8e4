//! `bench/strict-apns.sh`'s second at test size (issue 48): 1,000 calls due in one second
//! through the dispatcher and the production APNs client (a pool of `APNS_MAX_CONNECTIONS`'
//! default size, as wired for `APNS_ENDPOINT`) to the strict stand-in, 2 % of them to dead tokens
//! spread through the second (each 410 takes its connection to one stream until a success), one
//! graceful GOAWAY mid-second. Every live-token call reaches the stand-in exactly once, and no
//! call is recorded `failed` (push state unknown or not) that the stand-in never received. On the
//! real clock, in a debug build on a shared machine: nothing about time is asserted (the bench
//! has the lateness).

use std::sync::Arc;
use std::time::Duration;

use chrono::{FixedOffset, Utc};
use koe::dispatch::{Dispatcher, RunCause};
use koe::domain::device::DeviceId;
use koe::domain::reservation::ReservationStatus;
use koe::platform::clock::SystemClock;
use koe::platform::config::{Config, Vars};
use koe::store::memory::MemoryStore;
use koe::store::prelude::*;
use koe_testkit::dispatching::reserve_at;
use koe_testkit::push::strict::{StrictApns, StrictSettings};

const CALLS: usize = 1_000;
/// Every 50th call (2 %) goes to a dead token.
const DEAD_EVERY: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_with_dead_tokens_and_a_goaway_reaches_apns_once_per_live_call() {
    let apns = StrictApns::start(StrictSettings::crowded()).await;
    let store = Arc::new(MemoryStore::new());
    let now = Utc::now();
    let second = chrono::DateTime::from_timestamp(now.timestamp() + 3, 0).unwrap();
    let jst = FixedOffset::east_opt(9 * 3600).unwrap();
    let mut calls = Vec::with_capacity(CALLS);
    for i in 0..CALLS {
        let (name, token) = (format!("strict-{i}"), format!("{i:064x}"));
        let at = second + chrono::Duration::milliseconds((i * 1000 / CALLS) as i64);
        let r = reserve_at(&*store, &name, &token, at.with_timezone(&jst), now).await;
        let dead = i % DEAD_EVERY == DEAD_EVERY / 2;
        if dead {
            apns.unregister(&token);
        }
        calls.push((name, r.call_id, dead));
    }
    apns.go_away_after(CALLS as u64 / 2);

    let pool = koe_testkit::push::production_pool(apns.addr);
    let mut settings = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    settings.window = Duration::from_secs(5);
    settings.reselect_every = Duration::from_secs(1);
    let store_port: Arc<dyn Store> = store.clone();
    let dispatcher = Dispatcher::new(
        store_port,
        Arc::new(pool),
        Arc::new(SystemClock),
        settings,
        "strict",
    );
    let report = dispatcher.run(RunCause::Local).await;

    let mut unreceived_failures = Vec::new();
    let mut live_not_once = Vec::new();
    for (name, call_id, dead) in &calls {
        let received = apns.processed(call_id.as_str());
        let device = DeviceId::parse("deviceId", name).unwrap();
        let status = store
            .get_reservation(&device, Utc::now())
            .await
            .unwrap()
            .map(|r| r.status);
        if !dead && received != 1 {
            live_not_once.push((name, received, status));
        }
        if received == 0 && status == Some(ReservationStatus::Failed) {
            unreceived_failures.push((name, dead));
        }
        assert!(received <= 1, "{name} reached APNs {received} times");
    }
    eprintln!(
        "{CALLS} calls, {} to dead tokens: {} sent, {} failed ({} dead tokens, {} push state \
         unknown); {} GOAWAYs, {} streams refused, {} connections",
        CALLS / DEAD_EVERY,
        report.sent,
        report.failed,
        report.dead_tokens,
        report.push_unknown,
        apns.go_aways(),
        apns.refused(),
        apns.connections()
    );
    assert!(apns.go_aways() >= 1, "the GOAWAY came within the second");
    assert_eq!(live_not_once, [], "live calls not received exactly once");
    assert_eq!(
        unreceived_failures,
        [],
        "recorded failed, yet never reached APNs"
    );
}
