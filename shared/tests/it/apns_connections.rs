//! The APNs adapter (`koe::push::apns`, its pool and HTTP/2 connections) against a loopback
//! stand-in APNs (`koe_testkit::push::standin`).

use std::sync::Arc;

use koe::config::{ApnsConfig, Secret};
use koe::push::apns::{ApnsHosts, ApnsSender};
use koe::push::connection::{ApnsHost, ConnectionTimings};
use koe::push::pool::{PoolSettings, PushPool};
use koe::push::{PushError, PushSender};
use koe_testkit::push::push_and_device;
use koe_testkit::push::standin::StandInApns;

const TEST_P8: &str = include_str!("../../../testkit/keys/apns-test.p8");

fn config() -> ApnsConfig {
    ApnsConfig {
        key_p8: Secret::new(TEST_P8),
        key_id: "ABCDE12345".into(),
        team_id: "TEAM123456".into(),
        bundle_id: "com.example.koe".into(),
    }
}

fn pool(apns: &StandInApns, timings: ConnectionTimings, settings: PoolSettings) -> Arc<PushPool> {
    let hosts = ApnsHosts {
        production: ApnsHost::Plain(apns.addr),
        sandbox: ApnsHost::Plain(apns.addr),
    };
    let factory = ApnsSender::connections_to(&config(), hosts, timings).expect("the test key");
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
