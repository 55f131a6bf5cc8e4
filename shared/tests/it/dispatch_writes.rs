//! What one call costs in writes (issue 38: at most 5 WRU per call to a device without
//! `confirmsCalls`). A call to such a device is two write requests on it, the claim (naming its
//! batch) and the outcome, and its share of its batch's mark (one write for all of the run's
//! pushes of its second; here the only one): 4 write units, the claim 1, the mark 1, the outcome
//! 1 and its index entry's removal 1. Costed by the limits model on both stores: in-process
//! (`LimitedStore`, the embedded store) and in front of DynamoDB Local (`limits_proxy`).

use std::sync::{Arc, Mutex};

use koe::domain::reservation::{Reservation, ReservationStatus};
use koe::platform::clock::SystemClock;
use koe::store::memory::MemoryStore;
use koe::store::prelude::*;
use koe::store::{DUE_INDEX, Op, Request};
use koe_testkit::dispatching::{reserve_soon, run_once, short_run, stored};
use koe_testkit::dynamodb::limited_store::LimitedStore;
use koe_testkit::dynamodb::limits::{Limits, LimitsModel, Stats, Target};
use koe_testkit::dynamodb::limits_proxy::LimitsProxy;
use koe_testkit::push::RecordingPushSender;

/// In front of a store: the name of each write request, with the device it is on (the
/// dispatcher's writes on a call), in order.
struct Writes {
    inner: Arc<dyn Store>,
    seen: Mutex<Vec<(&'static str, Option<String>)>>,
}

koe_testkit::store_layer!(Writes, |this, op, call| {
    if !matches!(op.request(), Request::GetItem | Request::Query) {
        let device = match op {
            Op::ClaimDue(id, ..)
            | Op::MarkPushStarted(id, ..)
            | Op::ReleaseClaim(id, ..)
            | Op::FinishReservation(id, ..)
            | Op::ClaimNotice(id, ..)
            | Op::NoticeSent(id, ..) => Some(id.as_str().to_owned()),
            _ => None,
        };
        this.seen.lock().unwrap().push((op.name(), device));
    }
    call().await
});

impl Writes {
    /// The write requests made on `r`'s call.
    fn on(&self, r: &Reservation) -> Vec<&'static str> {
        let seen = self.seen.lock().unwrap();
        let on_call = seen
            .iter()
            .filter(|(_, d)| d.as_deref() == Some(r.device_id.as_str()));
        on_call.map(|(name, _)| *name).collect()
    }

    /// How many write requests named `name` were made.
    fn named(&self, name: &str) -> usize {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|(n, _)| *n == name).count()
    }

    /// How many writes of the run were not on a call and are charged (`charged`): each one
    /// write unit (a small item: a minute's watch, the sweep mark).
    fn others(&self, charged: &[&str]) -> usize {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(name, d)| d.is_none() && charged.contains(name))
            .count()
    }
}

/// The write units consumed on `target` between `before` and `after`.
fn wcu(before: &Stats, after: &Stats, target: &Target) -> f64 {
    let of = |s: &Stats| s.consumed.get(target).map_or(0.0, |c| c.wcu);
    of(after) - of(before)
}

/// One run over one call to a device without `confirmsCalls` (stored already), through
/// `writes`: the call is sent once, with exactly a claim and an outcome on it and its batch's one
/// mark, which consume 4 write units: on the calls table less the run's other writes
/// (`charged`, one unit each), plus the index's.
async fn one_call_costs(
    writes: Arc<Writes>,
    r: &Reservation,
    model: &LimitsModel,
    calls_table: &str,
    charged: &[&str],
) {
    let push = Arc::new(RecordingPushSender::new(Arc::new(SystemClock)));
    let before = model.stats();
    let report = run_once(writes.clone(), push.clone(), short_run()).await;
    let after = model.stats();
    assert_eq!(
        push.sent_for_call(r.call_id.as_str()).len(),
        1,
        "{report:?}"
    );
    assert_eq!(stored(&*writes, r).await.status, ReservationStatus::Sent);
    let base = wcu(&before, &after, &Target::base(calls_table));
    let index = wcu(&before, &after, &Target::index(calls_table, DUE_INDEX));
    let units = base - writes.others(charged) as f64 + index;
    assert_eq!(
        (writes.on(r), writes.named("MarkBatch"), units),
        (vec!["ClaimDue", "FinishReservation"], 1, 4.0),
        "the claim 1, its batch's mark 1, the outcome 1 + its index entry 1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_confirms_calls_is_four_write_units_on_memory() {
    let inner = Arc::new(MemoryStore::new());
    let r = reserve_soon(inner.as_ref(), "writes-memory", 1500).await;
    let model = LimitsModel::with_frozen_clock(Limits::default());
    let limited = Arc::new(LimitedStore::new(inner, model));
    let writes = Arc::new(Writes {
        inner: limited.clone(),
        seen: Mutex::new(Vec::new()),
    });
    // The in-process model charges a minute's watch and a wake, not the sweep mark.
    let charged = ["WatchMinute", "ClaimWake"];
    one_call_costs(writes, &r, limited.model(), "calls", &charged).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_confirms_calls_is_four_write_units_on_dynamodb() {
    let upstream = tokio::task::spawn_blocking(koe_testkit::dynamodb::endpoint)
        .await
        .unwrap();
    let setup = koe_testkit::dynamodb::client().await;
    let prefix = koe_testkit::dynamodb::random_prefix();
    let tables = koe_testkit::dynamodb::create_tables(&setup, &prefix).await;
    let model = Arc::new(LimitsModel::with_frozen_clock(Limits::default()));
    let proxy = LimitsProxy::over_tables(&upstream, &tables, model).await;
    let client = koe_testkit::dynamodb::production_like_client(&proxy.url());
    let calls_table = tables.calls.clone();
    let store = Arc::new(koe::store::dynamodb::DynamoStore::new(client, tables));
    let r = reserve_soon(store.as_ref(), "writes-dynamodb", 1500).await;
    let writes = Arc::new(Writes {
        inner: store,
        seen: Mutex::new(Vec::new()),
    });
    let charged = ["WatchMinute", "ClaimWake", "RaiseSweptBefore"];
    one_call_costs(writes, &r, proxy.model(), &calls_table, &charged).await;
}
