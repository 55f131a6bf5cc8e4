//! docs/dynamodb.md's units per call, measured: each case is one run of the real dispatcher
//! (`koe::dispatch::Dispatcher`, the deployed settings unless the case says otherwise) over the
//! embedded store behind the limits model (`LimitedStore`, which charges each of its requests
//! as the DynamoDB adapter would send it), on tokio's paused time from fixed instants, so every
//! run writes the same figures however busy the machine. A device that confirms its calls
//! confirms through `POST /calls/confirm`'s handler a second after the push it answers.
//!
//! A call's units are those of the requests on it (its device's read, claim, mark, give-back,
//! outcome, confirmation, and the confirmation's secret read); a run's selection and watch
//! (`DueCount`, `DueCalls`, `WatchMinute`, `ClaimWake`) are the run's, not the call's. The
//! create is the API's: [`create`] costs it with the same charge functions.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use koe::calls::confirm::{ConfirmContext, confirm};
use koe::dispatch::{Dispatcher, RunCause};
use koe::domain::device::Device;
use koe::domain::due::{COUNT_STEP, shard_key};
use koe::domain::reservation::{CallId, Reservation, ScheduledAt};
use koe::platform::clock::Clock;
use koe::platform::config::{Config, DispatchConfig, Vars};
use koe::platform::metrics::{MemorySink, Metrics};
use koe::push::{Notice, PushError, PushSender, VoipPush};
use koe::store::Store;
use koe::store::memory::MemoryStore;
use serde_json::json;

use crate::clock::TokioClock;
use crate::dispatching::{reserve_for, short_run};
use crate::dynamodb::limited_store::LimitedStore;
use crate::dynamodb::limits::{
    Charge, Item, Limits, LimitsModel, TableDef, read_charge, write_charges,
};
use crate::push::{RecordingPushSender, device};

/// The crowded second: `dispatch_budget.rs`'s first case (60 calls due in one second, a
/// 40 WRU/s table, the run started 8 s ahead with a 10 s window), whose claims mostly leave
/// their lead and whose one batch mark the 60 share.
const CROWD: usize = 60;
const CROWD_BUDGET: u32 = 40;

/// One case: one call to a device (or, crowded, [`CROWD`] calls to devices alike) due at one
/// second.
struct Case {
    confirming: Confirming,
    crowded: bool,
}

/// Whether the device confirms its calls (`confirmsCalls`), and which push it confirms.
#[derive(Clone, Copy)]
enum Confirming {
    No,
    /// Confirms the push numbered so (the first is 1).
    Push(u32),
    /// Never confirms.
    Never,
}

/// Write and read units (shown `WRU / RRU`).
#[derive(Clone, Copy, Default)]
struct Units {
    wru: f64,
    rru: f64,
}

impl std::ops::Add for Units {
    type Output = Units;
    fn add(self, other: Units) -> Units {
        Units {
            wru: self.wru + other.wru,
            rru: self.rru + other.rru,
        }
    }
}

impl std::fmt::Display for Units {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let round = |x: f64| (x * 100.0).round() / 100.0;
        write!(f, "{} / {}", round(self.wru), round(self.rru))
    }
}

/// A create as the API makes it (`POST /calls` without `Idempotency-Key` or a wake claim): the
/// device's secret read (strong), the minute's count read (eventual), the reservation's put
/// with its index entry, and one count raise in `COUNT_STEP` creates (a small item: 1 WRU). The
/// limits model charges only the dispatcher, so this is costed here, with its charge functions,
/// on the items the adapter writes.
fn create() -> Units {
    let calls = TableDef::from_template("CallsTable", "calls");
    let d = device("create", &format!("{:064x}", 1), at("2026-01-01T06:00:00Z"));
    let r = Reservation::new(
        d.device_id.clone(),
        ScheduledAt::from_stored(at("2026-01-01T07:00:00Z").fixed_offset()),
        None,
        at("2026-01-01T06:00:00Z"),
    );
    let minute = r.scheduled_at.due_minute();
    let count_key = format!("due#{minute}");
    let count = Item::from([
        ("deviceId".to_owned(), json!({ "S": count_key })),
        ("count".to_owned(), json!({ "N": COUNT_STEP.to_string() })),
        ("expireAt".to_owned(), json!({ "N": "1800000000" })),
        ("lastCallId".to_owned(), json!({ "S": r.call_id.as_str() })),
    ]);
    let key = Item::from([("deviceId".to_owned(), json!({ "S": d.device_id.as_str() }))]);
    let item = LimitedStore::call_item(&r, Some(&shard_key(&minute, 0)));
    let sum = |charges: Vec<Charge>| -> f64 { charges.iter().map(|c| c.units).sum() };
    let put = sum(write_charges(&calls, &key, None, Some(&item)));
    let raise = sum(write_charges(&calls, &count, Some(&count), Some(&count)));
    let count_read = read_charge(&calls, None, &count_key, Some(&count), false).units;
    Units {
        wru: put + raise / f64::from(COUNT_STEP),
        rru: secret_read(&d) + count_read,
    }
}

/// An API request's read of the device's secret: its item, strongly consistent.
fn secret_read(d: &Device) -> f64 {
    let devices = TableDef::from_template("DevicesTable", "devices");
    let item = LimitedStore::device_item(d);
    read_charge(&devices, None, d.device_id.as_str(), Some(&item), true).units
}

fn at(rfc3339: &str) -> DateTime<Utc> {
    rfc3339.parse().expect("an RFC 3339 instant")
}

/// The store as the API's handlers and the dispatcher share it, counting the secret reads the
/// limits model leaves uncharged (an API request's).
struct Counted {
    inner: Arc<dyn Store>,
    secret_reads: Mutex<u32>,
}

crate::store_layer!(Counted, |this, op, call| {
    if op.name() == "DeviceProof" {
        *this.secret_reads.lock().unwrap() += 1;
    }
    call().await
});

/// The phone: the push goes to the recording sender; the push numbered `confirms` is confirmed
/// a second later through the handler of `POST /calls/confirm`.
struct Phone {
    apns: RecordingPushSender,
    confirms: Option<u32>,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    grace: chrono::Duration,
    /// The confirmations under way (awaited, so that one that fails stops the measure).
    confirmations: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

#[async_trait]
impl PushSender for Phone {
    async fn send(&self, push: &VoipPush, device: &Device) -> Result<(), PushError> {
        self.apns.send(push, device).await?;
        if self.confirms == Some(push.attempt) {
            let (store, clock, grace) = (self.store.clone(), self.clock.clone(), self.grace);
            let body = json!({ "deviceId": device.device_id.as_str(), "callId": push.call_id });
            let confirmation = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let metrics = Metrics::new(Arc::new(MemorySink::default()), "confirm-call");
                let cx = ConfirmContext {
                    store: store.as_ref(),
                    clock: clock.as_ref(),
                    grace,
                    salt: "units",
                    metrics: &metrics,
                };
                let request = http::Request::post("/calls/confirm")
                    .body(Bytes::from(body.to_string()))
                    .expect("a request");
                let status = confirm(&cx, request).await.map(|r| r.status());
                assert_eq!(status.ok(), Some(http::StatusCode::OK), "the confirmation");
            });
            self.confirmations.lock().unwrap().push(confirmation);
        }
        Ok(())
    }

    async fn send_notice(&self, notice: Notice<'_>) -> Result<(), PushError> {
        self.apns.send_notice(notice).await
    }
}

/// The deployed dispatch settings.
fn deployed() -> DispatchConfig {
    Config::from_vars(&Vars::from_pairs(&[]))
        .expect("defaults are valid")
        .dispatch
}

/// What one call of `case` costs (a crowd's: on average): its requests' units, as charged.
async fn measure(case: &Case) -> Units {
    let (calls, lead) = if case.crowded { (CROWD, 8) } else { (1, 10) };
    let at = at("2026-01-01T07:00:00Z");
    let now = at - chrono::Duration::seconds(lead);
    let clock = Arc::new(TokioClock::at(now));
    let inner = Arc::new(MemoryStore::new());
    for i in 0..calls {
        let mut d = device(&format!("units-{i:04}"), &format!("{:064x}", i + 1), now);
        d.confirms_calls = !matches!(case.confirming, Confirming::No);
        let call = CallId::generate();
        reserve_for(inner.as_ref(), &d, at.fixed_offset(), None, now, call).await;
    }
    let (mut limits, mut settings) = (Limits::default(), deployed());
    if case.crowded {
        limits.table_write_units = f64::from(CROWD_BUDGET);
        settings = short_run();
        settings.window = Duration::from_secs(10);
        settings.write_budget = CROWD_BUDGET;
    }
    let limited = Arc::new(LimitedStore::new(inner, LimitsModel::on_tokio_time(limits)));
    let store = Arc::new(Counted {
        inner: limited.clone(),
        secret_reads: Mutex::new(0),
    });
    let phone = Arc::new(Phone {
        apns: RecordingPushSender::new(clock.clone()),
        confirms: match case.confirming {
            Confirming::Push(n) => Some(n),
            Confirming::No | Confirming::Never => None,
        },
        store: store.clone(),
        clock: clock.clone(),
        grace: chrono::Duration::from_std(settings.grace).expect("a short grace"),
        confirmations: Mutex::default(),
    });
    let max_pushes = settings.max_pushes as usize;
    let report = Dispatcher::new(store.clone(), phone.clone(), clock, settings, "units")
        .run(RunCause::Local)
        .await;
    let confirmations = std::mem::take(&mut *phone.confirmations.lock().unwrap());
    for confirmation in confirmations {
        confirmation.await.expect("the confirmation");
    }

    let pushes = match case.confirming {
        Confirming::No => 1,
        Confirming::Push(n) => n as usize,
        Confirming::Never => max_pushes,
    };
    assert_eq!(phone.apns.sent().len(), calls * pushes, "{report:?}");
    let stats = limited.model().stats();
    assert_eq!(stats.throttled(), 0, "a case is measured unthrottled");
    let run_wide = ["DueCount", "DueCalls", "WatchMinute", "ClaimWake"];
    let on_calls = limited
        .consumed_by_request()
        .into_iter()
        .filter(|(request, _)| !run_wide.contains(request))
        .fold(Units::default(), |sum, (_, c)| {
            sum + Units {
                wru: c.wcu,
                rru: c.rcu,
            }
        });
    let d = device("units-0000", &format!("{:064x}", 1), now);
    let secret = f64::from(*store.secret_reads.lock().unwrap()) * secret_read(&d);
    let calls = calls as f64;
    Units {
        wru: on_calls.wru / calls,
        rru: (on_calls.rru + secret) / calls,
    }
}

/// The block: each case measured, on one paused runtime of its own (call it off any runtime's
/// thread: `spawn_blocking`).
pub(super) fn table() -> String {
    let max_pushes = deployed().max_pushes;
    let case = |confirming, crowded| Case {
        confirming,
        crowded,
    };
    let cases = [
        (
            "a device without `confirmsCalls`".to_owned(),
            case(Confirming::No, false),
        ),
        (
            format!("a crowded second (`dispatch_budget.rs`: {CROWD} at {CROWD_BUDGET} WRU/s)"),
            case(Confirming::No, true),
        ),
        (
            "`confirmsCalls`, confirmed after the first push".to_owned(),
            case(Confirming::Push(1), false),
        ),
        (
            "confirmed after the second push".to_owned(),
            case(Confirming::Push(2), false),
        ),
        (
            format!("never confirmed ({max_pushes} pushes)"),
            case(Confirming::Never, false),
        ),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let create = create();
    let mut out = format!(
        "| call | dispatch, confirmation: WRU / RRU | with a create ({create}) |\n| --- | --- | --- |\n"
    );
    for (name, case) in cases {
        let units = runtime.block_on(measure(&case));
        out += &format!("| {name} | {units} | {} |\n", units + create);
    }
    out
}
