//! Unit tests of the limits model: rates, refill, all or nothing, debts, refunds, and its
//! in-process use on items.

use std::time::{Duration, Instant};

use super::*;

fn write(target: Target, key: &str, units: f64) -> Charge {
    Charge {
        target,
        key: key.to_owned(),
        capacity: Capacity::Write,
        units,
    }
}

fn calls() -> Target {
    Target::base("calls")
}

#[test]
fn one_partition_takes_1000_wcu_a_second_and_no_more() {
    let model = LimitsModel::new(Limits::default());
    let t0 = Instant::now();
    let one = [write(calls(), "d1", 1.0)];
    let taken = (0..1500)
        .filter(|_| model.charge_at("PutItem", &one, t0).is_ok())
        .count();
    assert_eq!(taken, 1000);
    // Another partition of the same table has its own bucket.
    assert!(
        model
            .charge_at("PutItem", &[write(calls(), "d2", 1.0)], t0)
            .is_ok()
    );
    let stats = model.stats();
    assert_eq!(stats.throttled_by_operation["PutItem"], 500);
    assert_eq!(stats.throttled_by_target[&calls()], 500);
    assert_eq!(stats.consumed[&calls()].wcu, 1001.0);
    assert_eq!(
        stats.to_string(),
        "hottest partition: 1000 WCU/s on calls partition \"d1\"; 500 requests throttled"
    );
    let hottest = stats.hottest_write.unwrap();
    assert_eq!(
        (hottest.key.as_str(), hottest.units_per_sec),
        ("d1", 1000.0)
    );
}

#[test]
fn a_bucket_refills_continuously_up_to_its_burst() {
    let model = LimitsModel::new(Limits::default());
    let t0 = Instant::now();
    let all = [write(calls(), "d", 1000.0)];
    model.charge_at("PutItem", &all, t0).unwrap();
    let half = [write(calls(), "d", 500.0)];
    let t = t0 + Duration::from_millis(400);
    assert!(
        model.charge_at("PutItem", &half, t).is_err(),
        "400 WCU refilled"
    );
    let t = t0 + Duration::from_millis(500);
    assert!(
        model.charge_at("PutItem", &half, t).is_ok(),
        "500 WCU refilled"
    );
    // Ten idle seconds keep one second's worth, not ten.
    let t = t + Duration::from_secs(10);
    assert!(model.charge_at("PutItem", &all, t).is_ok());
    assert!(
        model
            .charge_at("PutItem", &[write(calls(), "d", 1.0)], t)
            .is_err()
    );
}

/// A model whose GSI partition "m" has already been charged `units` write units at `t0`.
fn gsi_partition_holding(units: f64) -> (LimitsModel, Instant, Target) {
    let model = LimitsModel::new(Limits::default());
    let t0 = Instant::now();
    let gsi = Target::index("calls", "byDueMinute");
    model
        .charge_at("PutItem", &[write(gsi.clone(), "m", units)], t0)
        .unwrap();
    (model, t0, gsi)
}

#[test]
fn a_request_pays_every_partition_or_none() {
    let (model, t0, gsi) = gsi_partition_holding(999.5);
    let both = [write(calls(), "d", 1.0), write(gsi.clone(), "m", 1.0)];
    let throttled = model.charge_at("PutItem", &both, t0).unwrap_err();
    assert_eq!(throttled.target, gsi);
    assert_eq!(throttled.key, "m");
    assert!(throttled.message().contains("global secondary indexes"));
    // The base partition paid nothing: it still holds its full 1000.
    let base = [write(calls(), "d", 1000.0)];
    assert!(model.charge_at("PutItem", &base, t0).is_ok());
    let throttled = model.charge_at("PutItem", &base, t0).unwrap_err();
    assert!(throttled.message().contains("capacity of your table"));
}

#[test]
fn two_charges_to_one_partition_are_summed_before_the_check() {
    let (model, t0, gsi) = gsi_partition_holding(999.0);
    let twice = [write(gsi.clone(), "m", 1.0), write(gsi.clone(), "m", 1.0)];
    assert!(model.charge_at("UpdateItem", &twice, t0).is_err());
}

#[test]
fn a_read_debt_delays_later_reads_and_reads_have_their_own_bucket() {
    let model = LimitsModel::new(Limits::default());
    let t0 = Instant::now();
    let read = |units| Charge {
        target: calls(),
        key: "d".to_owned(),
        capacity: Capacity::Read,
        units,
    };
    model.debit_at(&[read(4000.0)], t0);
    let t = t0 + Duration::from_millis(300);
    assert!(model.charge_at("GetItem", &[read(0.5)], t).is_err(), "-100");
    let t = t0 + Duration::from_millis(400);
    assert!(model.charge_at("GetItem", &[read(0.5)], t).is_ok(), "+200");
    assert!(
        model
            .charge_at("PutItem", &[write(calls(), "d", 1000.0)], t)
            .is_ok()
    );
    assert_eq!(model.stats().consumed[&calls()].rcu, 4000.5);
}

#[test]
fn a_refund_gives_the_units_back() {
    let model = LimitsModel::with_frozen_clock(Limits::default());
    let all = [write(calls(), "d", 1000.0)];
    model.charge("PutItem", &all).unwrap();
    model.refund(&[write(calls(), "d", 10.0)]);
    assert!(
        model
            .charge("PutItem", &[write(calls(), "d", 10.0)])
            .is_ok()
    );
    assert!(
        model
            .charge("PutItem", &[write(calls(), "d", 1.0)])
            .is_err()
    );
    model.advance(Duration::from_millis(1));
    assert!(model.charge("PutItem", &[write(calls(), "d", 1.0)]).is_ok());
    assert_eq!(model.stats().consumed[&calls()].wcu, 1001.0);
}

/// The in-process form, as an in-memory store would use it: the proxy's costing on items in
/// DynamoDB JSON, charged straight to the model.
#[test]
fn in_process_2000_reservations_on_one_minute_write_1000_and_512_minutes_take_all() {
    use serde_json::json;

    use super::{Item, TableDef, write_charges};

    let def = TableDef::calls();
    let reservation = |i: usize, minute: String| -> (Item, Item) {
        let item: Item = serde_json::from_value(json!({
            "deviceId": {"S": format!("d{i}")}, "status": {"S": "scheduled"},
            "dueMinute": {"S": minute}, "scheduledAtMs": {"N": i.to_string()},
        }))
        .unwrap();
        (def.key_of(&item), item)
    };
    let run = |minute: &dyn Fn(usize) -> String| {
        let model = LimitsModel::with_frozen_clock(Limits::default());
        let written = (0..2000)
            .filter(|i| {
                let (key, item) = reservation(*i, minute(*i));
                let charges = write_charges(&def, &key, None, Some(&item));
                model.charge("PutItem", &charges).is_ok()
            })
            .count();
        (written, model.stats())
    };
    let (written, stats) = run(&|_| "22:00".to_owned());
    assert_eq!(written, 1000);
    assert_eq!(
        stats.throttled_by_target[&Target::index("calls", "byDueMinute")],
        1000
    );
    let (written, stats) = run(&|i| format!("m{}", i % 512));
    assert_eq!(written, 2000);
    assert_eq!(stats.hottest_write.unwrap().units_per_sec, 4.0);
}

mod tables;
