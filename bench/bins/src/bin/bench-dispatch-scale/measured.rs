//! What one process measured, written by a part and read and added up by the coordinator.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use koe::dispatch::RunReport;
use koe_testkit::dynamodb::held_replies::{HeldStats, HeldStore};
use koe_testkit::dynamodb::limited_store::LimitedStore;
use koe_testkit::push::limited::{Answer, LimitedApns};

/// What one process measured, as it hands it to the coordinator.
#[derive(Default)]
pub(super) struct Measured {
    /// (call, lateness in ms) of each accepted push.
    pub(super) pushes: Vec<(u64, f64)>,
    pub(super) sent: u32,
    pub(super) failed: u32,
    pub(super) lost: u32,
    pub(super) released: u32,
    pub(super) resolved: u32,
    pub(super) store_errors: u32,
    pub(super) held: HeldStats,
    pub(super) throttled: u64,
    /// Of those, throttled by a table's or GSI's own limit, not a partition's.
    pub(super) throttled_table: u64,
    pub(super) wcu: f64,
    pub(super) rcu: f64,
    pub(super) hottest_write: f64,
    pub(super) connections: usize,
    pub(super) queued: usize,
    /// Units charged each second (from the models' origin) to each table or index
    /// (`table` or `table/index`): (write, read).
    pub(super) rates: BTreeMap<(u64, String), (f64, f64)>,
}

impl Measured {
    pub(super) fn of(
        report: &RunReport,
        store: &LimitedStore,
        held: Option<&HeldStore>,
        apns: &LimitedApns,
        scheduled: &HashMap<u64, DateTime<Utc>>,
    ) -> Measured {
        let anchor = (tokio::time::Instant::now(), Utc::now());
        let wall = |t: tokio::time::Instant| {
            anchor.1 - chrono::Duration::from_std(anchor.0 - t).unwrap_or_default()
        };
        let pushes = apns
            .records()
            .into_iter()
            .filter(|r| r.answer == Answer::Accepted)
            .map(|r| {
                let late = (wall(r.left) - scheduled[&r.call])
                    .num_microseconds()
                    .unwrap();
                (r.call, late as f64 / 1000.0)
            })
            .collect();
        let stats = store.model().stats();
        let (wcu, rcu) = stats
            .consumed
            .values()
            .fold((0.0, 0.0), |(w, r), c| (w + c.wcu, r + c.rcu));
        let apns_stats = apns.stats();
        let mut rates = BTreeMap::new();
        for (second, targets) in &stats.by_second {
            for (target, c) in targets {
                let name = match &target.index {
                    Some(index) => format!("{}/{index}", target.table),
                    None => target.table.clone(),
                };
                rates.insert((*second, name), (c.wcu, c.rcu));
            }
        }
        Measured {
            rates,
            pushes,
            sent: report.sent,
            failed: report.failed,
            lost: report.lost + report.abandoned,
            released: report.released,
            resolved: report.resolved,
            store_errors: report.store_errors,
            held: held.map(HeldStore::stats).unwrap_or_default(),
            throttled: stats.throttled(),
            throttled_table: stats.throttled_table(),
            wcu,
            rcu,
            hottest_write: stats.hottest_write.map_or(0.0, |h| h.units_per_sec),
            connections: apns_stats.connections_used,
            queued: apns_stats.queued,
        }
    }

    pub(super) fn write(&self, path: &PathBuf) {
        let mut out = format!(
            "{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}\n",
            self.sent,
            self.failed,
            self.lost,
            self.released,
            self.resolved,
            self.held.held,
            self.held.timed_out,
            self.held.failed,
            self.store_errors,
            self.throttled,
            self.wcu,
            self.rcu,
            self.hottest_write,
            self.connections,
            self.queued,
            self.throttled_table
        );
        for (call, late) in &self.pushes {
            out.push_str(&format!("{call} {late}\n"));
        }
        for ((second, target), (w, r)) in &self.rates {
            out.push_str(&format!("R {second} {target} {w} {r}\n"));
        }
        std::fs::write(path, out).expect("write the part's results");
    }

    pub(super) fn read(path: &PathBuf) -> Measured {
        let text = std::fs::read_to_string(path).expect("a part's results");
        let mut rates = BTreeMap::new();
        for l in text.lines().filter(|l| l.starts_with("R ")) {
            let v: Vec<&str> = l.split(' ').collect();
            let (w, r) = (v[3].parse().unwrap(), v[4].parse().unwrap());
            rates.insert((v[1].parse().unwrap(), v[2].to_string()), (w, r));
        }
        let mut lines = text.lines().filter(|l| !l.starts_with("R "));
        let head: Vec<f64> = lines
            .next()
            .unwrap()
            .split(' ')
            .map(|v| v.parse().unwrap())
            .collect();
        Measured {
            sent: head[0] as u32,
            failed: head[1] as u32,
            lost: head[2] as u32,
            released: head[3] as u32,
            resolved: head[4] as u32,
            held: HeldStats {
                held: head[5] as u64,
                timed_out: head[6] as u64,
                failed: head[7] as u64,
            },
            store_errors: head[8] as u32,
            throttled: head[9] as u64,
            wcu: head[10],
            rcu: head[11],
            hottest_write: head[12],
            connections: head[13] as usize,
            queued: head[14] as usize,
            throttled_table: head[15] as u64,
            rates,
            pushes: lines
                .map(|l| {
                    let (call, late) = l.split_once(' ').unwrap();
                    (call.parse().unwrap(), late.parse().unwrap())
                })
                .collect(),
        }
    }

    pub(super) fn add(&mut self, other: Measured) {
        self.pushes.extend(other.pushes);
        self.sent += other.sent;
        self.failed += other.failed;
        self.lost += other.lost;
        self.released += other.released;
        self.resolved += other.resolved;
        self.held.held += other.held.held;
        self.held.timed_out += other.held.timed_out;
        self.held.failed += other.held.failed;
        self.store_errors += other.store_errors;
        self.throttled += other.throttled;
        self.throttled_table += other.throttled_table;
        self.wcu += other.wcu;
        self.rcu += other.rcu;
        self.hottest_write = self.hottest_write.max(other.hottest_write);
        self.connections += other.connections;
        self.queued += other.queued;
        for (key, (w, r)) in other.rates {
            let sum = self.rates.entry(key).or_default();
            sum.0 += w;
            sum.1 += r;
        }
    }
}
