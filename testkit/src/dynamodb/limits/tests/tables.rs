//! The table-level limits: each table's and each GSI's warm throughput (a new on-demand table's
//! 4,000 WRU/s and 12,000 RRU/s), capped by the per-table quota, as a bucket over all its
//! partitions.

use std::time::Duration;

use super::*;

fn gsi() -> Target {
    Target::index("calls", "byDueShard")
}

/// Charges `count` writes of 1 WRU, each to its own partition of `target`, at the frozen
/// clock's now; how many passed.
fn burst(model: &LimitsModel, target: &Target, count: usize, prefix: &str) -> usize {
    (0..count)
        .filter(|i| {
            let one = [write(target.clone(), &format!("{prefix}{i}"), 1.0)];
            model.charge("PutItem", &one).is_ok()
        })
        .count()
}

#[test]
fn a_new_table_takes_4000_writes_a_second_over_all_its_partitions() {
    let model = LimitsModel::with_frozen_clock(Limits::default());
    assert_eq!(burst(&model, &calls(), 5000, "d"), 4000);
    let one = [write(calls(), "another", 1.0)];
    let throttled = model.charge("PutItem", &one).unwrap_err();
    assert_eq!(
        (throttled.level, throttled.key.as_str()),
        (Level::Table, "")
    );
    assert!(throttled.message().contains("capacity of your table"));
    let stats = model.stats();
    assert_eq!(stats.throttled(), 1001);
    assert_eq!(stats.throttled_table(), 1001);
    assert_eq!(stats.throttled_partition(), 0);
    assert_eq!(stats.throttled_table_by_target[&calls()], 1001);
    assert_eq!(stats.by_second[&0][&calls()].wcu, 4000.0);
    assert_eq!(stats.peak(&calls()).wcu, 4000.0);
    assert!(
        stats
            .to_string()
            .ends_with("1001 requests throttled (1001 at table level)")
    );
    // Reads have their own 12,000.
    let read = |key: &str| Charge {
        target: calls(),
        key: key.to_owned(),
        capacity: Capacity::Read,
        units: 3000.0,
    };
    let reads = (0..5)
        .filter(|i| model.charge("Query", &[read(&format!("r{i}"))]).is_ok())
        .count();
    assert_eq!(reads, 4);
}

#[test]
fn the_next_second_refills_the_table_as_a_partition_continuously_up_to_one_second() {
    let model = LimitsModel::with_frozen_clock(Limits::default());
    assert_eq!(burst(&model, &calls(), 5000, "a"), 4000);
    model.advance(Duration::from_millis(500));
    assert_eq!(burst(&model, &calls(), 5000, "b"), 2000);
    model.advance(Duration::from_secs(10));
    assert_eq!(burst(&model, &calls(), 5000, "c"), 4000, "one second kept");
    let stats = model.stats();
    assert_eq!(stats.throttled_table(), 1000 + 3000 + 1000);
    assert_eq!(stats.by_second[&0][&calls()].wcu, 6000.0);
    assert_eq!(stats.by_second[&10][&calls()].wcu, 4000.0);
}

#[test]
fn a_configured_warm_throughput_of_10000_takes_the_whole_burst() {
    let limits = Limits {
        table_write_units: 10_000.0,
        ..Limits::default()
    };
    let model = LimitsModel::with_frozen_clock(limits);
    assert_eq!(burst(&model, &calls(), 5000, "d"), 5000);
    assert_eq!(model.stats().throttled(), 0);
}

#[test]
fn the_quota_caps_a_warm_throughput_above_it() {
    let limits = Limits {
        table_write_units: 10_000.0,
        quota_write_units: 3000.0,
        ..Limits::default()
    };
    let model = LimitsModel::with_frozen_clock(limits);
    assert_eq!(burst(&model, &calls(), 5000, "d"), 3000);
    let throttled = model
        .charge("PutItem", &[write(calls(), "x", 1.0)])
        .unwrap_err();
    assert_eq!(throttled.level, Level::Quota);
    assert_eq!(model.stats().throttled_table(), 2001);
}

#[test]
fn an_index_has_its_own_4000_and_a_write_it_refuses_is_not_taken_by_the_table() {
    let model = LimitsModel::with_frozen_clock(Limits::default());
    // Base and index entry in each write, each on its own partition: both budgets fill at 4,000.
    let both = |i: usize| {
        [
            write(calls(), &format!("d{i}"), 1.0),
            write(gsi(), &format!("m{i}"), 1.0),
        ]
    };
    let written = (0..4000)
        .filter(|i| model.charge("PutItem", &both(*i)).is_ok())
        .count();
    assert_eq!(written, 4000);
    model.advance(Duration::from_secs(1));
    // The index alone takes its 4,000 (writes changing only the index's entry).
    assert_eq!(burst(&model, &gsi(), 4500, "n"), 4000);
    // A write the index refuses: throttled at the index, and the table paid nothing.
    let throttled = model.charge("PutItem", &both(9999)).unwrap_err();
    assert_eq!(
        (throttled.target.clone(), throttled.level),
        (gsi(), Level::Table)
    );
    assert!(throttled.message().contains("global secondary indexes"));
    assert_eq!(burst(&model, &calls(), 4000, "e"), 4000);
    let stats = model.stats();
    assert_eq!(stats.throttled_table_by_target[&gsi()], 501);
    assert_eq!(stats.throttled_table_by_target.get(&calls()), None);
    assert_eq!(stats.by_second[&1][&gsi()].wcu, 4000.0);
    assert_eq!(stats.by_second[&1][&calls()].wcu, 4000.0);
}

#[test]
fn a_partition_throttle_is_counted_apart_from_the_table_s() {
    let model = LimitsModel::with_frozen_clock(Limits::default());
    let hot = [write(calls(), "hot", 1.0)];
    let taken = (0..1500)
        .filter(|_| model.charge("PutItem", &hot).is_ok())
        .count();
    assert_eq!(taken, 1000);
    assert_eq!(
        model.charge("PutItem", &hot).unwrap_err().level,
        Level::Partition
    );
    let stats = model.stats();
    assert_eq!(
        (stats.throttled_partition(), stats.throttled_table()),
        (501, 0)
    );
}

#[test]
fn scaled_limits_scale_the_table_figures_too() {
    let limits = Limits::default().scaled(1.0 / 20.0);
    assert_eq!(limits.wcu_per_sec, 50.0);
    assert_eq!(limits.table_rate(Capacity::Write), (200.0, false));
    assert_eq!(limits.table_rate(Capacity::Read), (600.0, false));
    let model = LimitsModel::with_frozen_clock(limits);
    assert_eq!(burst(&model, &calls(), 300, "d"), 200);
    let half = Limits::default().table_share(2);
    assert_eq!(half.table_rate(Capacity::Write), (2000.0, false));
    assert_eq!(half.wcu_per_sec, 1000.0);
}
