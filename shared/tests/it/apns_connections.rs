//! The APNs adapter (`koe::push::apns`, its pool and HTTP/2 connections) against a loopback
//! stand-in APNs (`koe_testkit::push::standin`).

use std::sync::Arc;
use std::time::Duration;

use koe::push::apns::{ApnsHosts, ApnsSender};
use koe::push::connection::{ApnsHost, ConnectionTimings};
use koe::push::pool::{PoolSettings, PushPool};
use koe::push::{PushError, PushSender};
use koe_testkit::push::push_and_device;
use koe_testkit::push::standin::StandInApns;

fn pool(apns: &StandInApns, timings: ConnectionTimings, settings: PoolSettings) -> Arc<PushPool> {
    let hosts = ApnsHosts {
        production: ApnsHost::Plain(apns.addr),
        sandbox: ApnsHost::Plain(apns.addr),
    };
    let factory = ApnsSender::connections_to(&koe_testkit::push::apns_config(), hosts, timings)
        .expect("the test key");
    Arc::new(PushPool::new(factory, settings))
}

async fn push(pool: &PushPool, n: usize) -> Result<(), PushError> {
    let (push, device) = push_and_device(&format!("c{n}"), "d1");
    pool.send(&push, &device).await
}

#[tokio::test]
async fn a_push_goes_out_and_is_accepted() {
    let apns = StandInApns::start().await;
    let pool = pool(&apns, ConnectionTimings::default(), PoolSettings::default());
    assert_eq!(push(&pool, 1).await, Ok(()));
    assert_eq!(apns.accepted(), 1);
    assert_eq!(apns.connections(), 1);
}

/// A connection that stopped answering without closing (no FIN, no RST; e.g. after the container
/// was frozen for minutes) is found dead before a push is sent on it: the push goes out on a new
/// connection instead of hanging until "push state unknown".
#[tokio::test]
async fn a_silently_dead_connection_is_replaced_before_a_push_is_sent_on_it() {
    let apns = StandInApns::start().await;
    let timings = ConnectionTimings {
        request: Duration::from_secs(1),
        check_after_idle: Duration::from_millis(50),
        ping: Duration::from_millis(200),
        ..ConnectionTimings::default()
    };
    let one = PoolSettings {
        max_connections: 1,
        ..PoolSettings::default()
    };
    let pool = pool(&apns, timings, one);
    assert_eq!(push(&pool, 1).await, Ok(()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(push(&pool, 2).await, Ok(()));
    assert_eq!(
        apns.connections(),
        1,
        "an idle connection that answers its PING is kept"
    );
    apns.silence_open_connections();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(push(&pool, 3).await, Ok(()));
    assert_eq!(apns.accepted(), 3);
    assert_eq!(apns.connections(), 2, "the dead one and its replacement");
}

/// One provider token per process, whatever the number of connections: APNs answers 429
/// `TooManyProviderTokenUpdates` to a provider that changes its token often.
#[tokio::test]
async fn every_connection_of_the_pool_sends_the_same_provider_token() {
    let apns = StandInApns::start().await;
    let four = PoolSettings {
        max_connections: 4,
        streams_per_connection: 2,
        ..PoolSettings::default()
    };
    let pool = pool(&apns, ConnectionTimings::default(), four);
    pool.prepare(8).await;
    let mut pushes = tokio::task::JoinSet::new();
    for n in 0..40 {
        let pool = pool.clone();
        pushes.spawn(async move { push(&pool, n).await });
    }
    assert!(pushes.join_all().await.iter().all(Result::is_ok));
    assert_eq!(pool.connections_open(), 4);
    assert_eq!(apns.connections(), 4);
    assert_eq!(apns.accepted(), 40);
    assert_eq!(apns.distinct_bearers(), 1);
}
