//! How much one partition takes: a due minute's 1000 writes a second, burst and refill, spread.

use super::*;

#[tokio::test]
async fn one_due_minute_takes_1000_reservations_a_second_and_throttled_ones_are_not_written() {
    let calls = Calls::start(LimitsModel::with_frozen_clock(Limits::default())).await;
    let client = calls.client(RetryConfig::disabled());

    let puts = put_all(&client, &calls.table, devices(2000, |_| MINUTE.to_owned())).await;
    eprintln!(
        "2000 PutItems on one dueShard (frozen clock) in {:?}: {} written, {} throttled; {}",
        puts.took,
        puts.written.len(),
        puts.throttled.len(),
        calls.proxy.stats()
    );
    // Each costs 1 WCU on its own base partition and 1 on the one GSI partition, which holds a
    // second's 1000: the clock stands still, so no refill.
    assert_eq!(puts.written.len(), 1000);
    assert_eq!(puts.throttled.len(), 1000);
    assert_eq!(
        calls.stored().await,
        puts.written,
        "written: present; throttled: absent"
    );
    let stats = calls.proxy.stats();
    assert_eq!(stats.throttled_by_operation["PutItem"], 1000);
    assert_eq!(stats.throttled_by_target[&calls.gsi()], 1000);
    assert_eq!(
        stats.throttled_by_target.get(&Target::base(&calls.table)),
        None
    );
    assert_eq!(stats.consumed[&calls.gsi()].wcu, 1000.0);
    assert_eq!(stats.consumed[&Target::base(&calls.table)].wcu, 1000.0);
    let hottest = stats.hottest_write.unwrap();
    assert_eq!(
        (hottest.target, hottest.key),
        (calls.gsi(), MINUTE.to_owned())
    );
    assert_eq!(hottest.units_per_sec, 1000.0);

    // A tenth of a second refills 100.
    calls.proxy.model().advance(Duration::from_millis(100));
    let again: Vec<(String, String)> = puts
        .throttled
        .iter()
        .take(150)
        .map(|d| (d.clone(), MINUTE.to_owned()))
        .collect();
    let retried = put_all(&client, &calls.table, again).await;
    assert_eq!((retried.written.len(), retried.throttled.len()), (100, 50));
    assert_eq!(calls.stored().await.len(), 1100);
}

/// On the real clock, at a tenth of the real limit (DynamoDB Local takes a few hundred requests
/// a second here, so at 1,000 WCU/s the refill would outrun any burst it can be sent).
#[tokio::test]
async fn on_the_real_clock_a_partition_takes_its_burst_plus_what_refilled_meanwhile() {
    let limits = Limits {
        wcu_per_sec: 100.0,
        ..Limits::default()
    };
    let calls = Calls::start(LimitsModel::new(limits)).await;
    let client = calls.client(RetryConfig::disabled());
    let puts = put_all(&client, &calls.table, devices(300, |_| MINUTE.to_owned())).await;
    let refilled = 100.0 * puts.took.as_secs_f64();
    eprintln!(
        "300 PutItems on one dueShard at 100 WCU/s (real clock) in {:?}: {} written, {} \
         throttled (at most 100 + {refilled:.0} refilled could be); {}",
        puts.took,
        puts.written.len(),
        puts.throttled.len(),
        calls.proxy.stats()
    );
    assert!(
        puts.written.len() >= 100,
        "the first second's 100 always fit"
    );
    assert!(
        puts.written.len() as f64 <= 100.0 + refilled.ceil(),
        "no more than the burst and the refill"
    );
    // Sent faster than burst and refill allow, some must be refused. (On a loaded machine the
    // 300 may take longer than 2 s to send, and then all fit: that is the model being right.)
    if 100.0 + refilled < 300.0 {
        assert!(!puts.throttled.is_empty(), "sent faster than the refill");
    }
    assert_eq!(calls.stored().await, puts.written);
}

#[tokio::test]
async fn the_same_reservations_spread_over_512_due_minutes_are_never_throttled() {
    let calls = Calls::start(LimitsModel::with_frozen_clock(Limits::default())).await;
    let client = calls.client(RetryConfig::disabled());
    let minute = |i: usize| format!("2026-01-01T{:02}:{:02}Z", i % 512 / 60, i % 512 % 60);
    let puts = put_all(&client, &calls.table, devices(2000, minute)).await;
    eprintln!(
        "2000 PutItems over 512 dueShards in {:?}: {}",
        puts.took,
        calls.proxy.stats()
    );
    assert_eq!(puts.written.len(), 2000);
    let stats = calls.proxy.stats();
    assert_eq!(stats.throttled(), 0);
    // 2000 over 512 minutes: at most 4 on one.
    assert_eq!(stats.hottest_write.unwrap().units_per_sec, 4.0);
    assert_eq!(stats.consumed[&calls.gsi()].wcu, 2000.0);
}
