//! docs/dynamodb.md's requests: each request the API and the dispatcher send, described here
//! (who sends it, the request, its key, its condition), with its units computed: the limits
//! model's charge functions (`write_charges`, `read_charge`) on the items as the adapter writes
//! them (`LimitedStore::call_item` and `device_item`; the keyed items below in the adapter's
//! layout, `shared/src/store/dynamodb/`), on the tables of `template.yaml`. A figure that is a
//! rule (a query's, the count's raise) is the model's figure for one step of it, in the rule's
//! words. Items are the largest the API allows where that matters (a 64-character caller name).

use std::ops::Add;

use chrono::{DateTime, Duration, Utc};
use koe::domain::device::Device;
use koe::domain::due::shard_key;
use koe::domain::reservation::{
    MAX_CALLER_NAME_CHARS, Reservation, ReservationStatus, ReservationView, ScheduledAt,
    terminal_expiry,
};
use koe::store::{DUE_INDEX, UsageRequest};
use serde_json::{Value, json};

use crate::dynamodb::limited_store::LimitedStore;
use crate::dynamodb::limits::{Capacity, Charge, Item, TableDef, read_charge, write_charges};
use crate::push::device;

/// A transaction's item writes cost twice a write's (its index entries as a write's).
///
/// Source: AWS's Developer Guide, "Amazon DynamoDB Transactions: How it works"
/// (`transaction-apis.html`), "Capacity management for transactions": DynamoDB makes two
/// underlying writes of every item in a transaction, one to prepare it and one to commit it.
/// The same page says a transaction's changes start propagating to global secondary indexes
/// once it has completed, so the index entries are written as any write's are. The guide
/// gives no figure for a transaction's index writes: that half is inferred from the
/// propagation, not stated.
const TRANSACTION_FACTOR: f64 = 2.0;

/// What a request (or a row's requests) costs: read units, write units on the table, write
/// units on its index (shown `1 RRU + 1 WRU + 1 index`, the zeros left out).
#[derive(Clone, Copy, Default, PartialEq, Debug)]
struct Units {
    rru: f64,
    wru: f64,
    index: f64,
}

impl Add for Units {
    type Output = Units;
    fn add(self, other: Units) -> Units {
        Units {
            rru: self.rru + other.rru,
            wru: self.wru + other.wru,
            index: self.index + other.index,
        }
    }
}

impl std::fmt::Display for Units {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts = [(self.rru, "RRU"), (self.wru, "WRU"), (self.index, "index")];
        let shown: Vec<String> = parts
            .iter()
            .filter(|(units, _)| *units > 0.0)
            .map(|(units, name)| format!("{units} {name}"))
            .collect();
        f.write_str(&shown.join(" + "))
    }
}

fn units(charges: Vec<Charge>) -> Units {
    charges.into_iter().fold(Units::default(), |sum, c| {
        match (c.capacity, c.target.index) {
            (Capacity::Read, _) => {
                sum + Units {
                    rru: c.units,
                    ..Units::default()
                }
            }
            (Capacity::Write, None) => {
                sum + Units {
                    wru: c.units,
                    ..Units::default()
                }
            }
            (Capacity::Write, Some(_)) => {
                sum + Units {
                    index: c.units,
                    ..Units::default()
                }
            }
        }
    })
}

/// The figure of requests that a row says cost the same `each`: panics if the model says
/// otherwise (the row's wording would be wrong).
fn each(row: &str, requests: &[Units]) -> Units {
    assert!(
        requests.windows(2).all(|w| w[0] == w[1]),
        "{row}: the requests cost differently ({requests:?})"
    );
    requests[0]
}

/// A write of `before` to `after` on `table`'s item (keyed as either is).
fn write(table: &TableDef, before: Option<&Item>, after: Option<&Item>) -> Units {
    let key = table.key_of(after.or(before).expect("an item"));
    units(write_charges(table, &key, before, after))
}

/// A GetItem of `item`, strongly consistent or not.
fn read(table: &TableDef, item: &Item, consistent: bool) -> Units {
    units(vec![read_charge(table, None, "", Some(item), consistent)])
}

fn s(text: &str) -> Value {
    json!({ "S": text })
}

fn n(number: i64) -> Value {
    json!({ "N": number.to_string() })
}

fn item<const N: usize>(attributes: [(&str, Value); N]) -> Item {
    attributes
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect()
}

fn at(rfc3339: &str) -> DateTime<Utc> {
    rfc3339.parse().expect("an RFC 3339 instant")
}

/// The tables, and a device and its reservation (due at 07:00, created at 06:00) in each of
/// the states the requests write.
struct Model {
    devices: TableDef,
    calls: TableDef,
    usage: TableDef,
    device: Device,
    scheduled: Reservation,
}

impl Model {
    fn new() -> Model {
        let now = at("2026-01-01T06:00:00Z");
        let device = device(&"d".repeat(36), &format!("{:064x}", 1), now);
        let scheduled = Reservation::new(
            device.device_id.clone(),
            ScheduledAt::from_stored(at("2026-01-01T07:00:00Z").fixed_offset()),
            Some("あ".repeat(MAX_CALLER_NAME_CHARS)),
            now,
        );
        Model {
            devices: TableDef::from_template("DevicesTable", "devices"),
            calls: TableDef::from_template("CallsTable", "calls"),
            usage: TableDef::from_template("AgentUsageTable", "usage"),
            device,
            scheduled,
        }
    }

    fn device_item(&self) -> Item {
        LimitedStore::device_item(&self.device)
    }

    fn minute(&self) -> String {
        self.scheduled.scheduled_at.due_minute()
    }

    /// The reservation as `change` leaves it, in shard 0 of its minute (`indexed`) or out of
    /// the index.
    fn call(&self, indexed: bool, change: impl FnOnce(&mut Reservation)) -> Item {
        let mut r = self.scheduled.clone();
        change(&mut r);
        let shard = indexed.then(|| shard_key(&self.minute(), 0));
        LimitedStore::call_item(&r, shard.as_deref())
    }

    fn claimed(r: &mut Reservation) {
        let at = r.due_at - Duration::seconds(2);
        r.status = ReservationStatus::Claimed;
        r.claimed_at = Some(at);
        r.mark_batch = Some(r.due_at);
    }

    fn pushed(r: &mut Reservation) {
        Self::claimed(r);
        r.push_started_at = Some(r.due_at);
    }

    fn finished(r: &mut Reservation, status: ReservationStatus) {
        Self::pushed(r);
        r.status = status;
        r.expire_at = Some(terminal_expiry(r.due_at));
    }

    /// The minute's count item, watched and its wake claimed.
    fn count(&self) -> Item {
        let watched = self.scheduled.due_at.timestamp_millis();
        item([
            ("deviceId", s(&format!("due#{}", self.minute()))),
            ("count", n(1_000_000)),
            ("expireAt", n(1_800_000_000)),
            ("lastCallId", s(self.scheduled.call_id.as_str())),
            ("watchedUntil", n(watched)),
            ("wakeClaimant", s(&"0".repeat(32))),
        ])
    }

    /// The kept 201 of a keyed create: the reservation's JSON, as the API answered it.
    fn kept_answer(&self) -> Item {
        let body = serde_json::to_string(&ReservationView::from(&self.scheduled)).unwrap();
        item([
            ("deviceId", s(&format!("idempotency#calls#{:064x}", 1))),
            ("requestHash", s(&format!("{:064x}", 2))),
            ("answerStatus", n(201)),
            ("answerBody", s(&body)),
            ("expireAt", n(1_800_000_000)),
        ])
    }

    fn tombstone(&self) -> Item {
        item([
            (
                "deviceId",
                s(&format!("cancelled#{}", self.scheduled.call_id.as_str())),
            ),
            ("expireAt", n(1_800_000_000)),
        ])
    }

    /// A usage counter (the agent's day, a plan's answers, a day's spend) as `ADD` leaves it.
    fn counter(&self, request: UsageRequest<'_>, count: i64) -> Item {
        let (partition, sort) = request.counter();
        item([
            ("deviceId", s(&partition)),
            ("day", s(&sort)),
            ("useCount", n(count)),
            ("expireAt", n(request.expire_at())),
            ("lastAdd", s(&format!("{:016x}", 3))),
        ])
    }

    /// An `ADD` of the counter `request` names.
    fn add(&self, request: UsageRequest<'_>, count: i64) -> Units {
        let before = self.counter(request, count);
        let after = self.counter(request, count + 1);
        write(&self.usage, Some(&before), Some(&after))
    }

    /// A shard's query, on as many entries as make 4 KB.
    fn query_per_4_kb(&self) -> Units {
        let gsi = self.calls.gsi(DUE_INDEX).expect("the bucket index");
        let entry = self
            .calls
            .projected(gsi, &self.call(true, |_| {}))
            .expect("a scheduled call's entry");
        let per_4_kb = 4096 / crate::dynamodb::limits::item_size(&entry);
        let entries = vec![entry; per_4_kb];
        units(vec![read_charge(
            &self.calls,
            Some(DUE_INDEX),
            "",
            &entries,
            false,
        )])
    }
}

/// One row: who sends, the request, its key, its condition, and its units.
type Row = [String; 5];

fn row(who: &str, request: &str, key: &str, condition: &str, units: String) -> Row {
    [
        who.to_owned(),
        request.to_owned(),
        key.to_owned(),
        condition.to_owned(),
        units,
    ]
}

fn rows() -> Vec<Row> {
    let m = Model::new();
    let (calls, devices) = (&m.calls, &m.devices);
    let scheduled = m.call(true, |_| {});
    let device_item = m.device_item();
    let secret = read(devices, &device_item, true);
    let count = m.count();
    let count_read = read(calls, &count, false);
    let count_write = write(calls, Some(&count), Some(&count));
    let day = "2026-01-01";

    let register = secret + write(devices, Some(&device_item), Some(&device_item));
    let keyed = read(calls, &m.kept_answer(), true) + read(calls, &m.tombstone(), true);
    let put = write(calls, None, Some(&scheduled));
    // A stale record of another minute, its entry in another partition.
    let stale = m.call(true, |r| {
        r.call_id = koe::domain::reservation::CallId::generate();
        r.due_at -= Duration::days(1);
        r.scheduled_at = ScheduledAt::from_stored(r.due_at.fixed_offset());
    });
    let replaces = write(calls, Some(&stale), Some(&scheduled));
    let cancelled = m.call(false, |r| r.status = ReservationStatus::Cancelled);
    let cancel = write(calls, Some(&scheduled), Some(&cancelled));
    let transaction = cancel + write(calls, None, Some(&m.tombstone()));
    let cancel_row = read(calls, &scheduled, true)
        + Units {
            wru: transaction.wru * TRANSACTION_FACTOR,
            ..transaction
        };
    let pushed = m.call(true, Model::pushed);
    let rang = m.call(false, |r| {
        Model::pushed(r);
        r.status = ReservationStatus::Rang;
        r.rang_at = r.push_started_at;
    });
    let swept = item([
        ("deviceId", s("due#swept")),
        ("sweptBefore", n(1_767_250_800_000)),
    ]);
    let claimed = m.call(true, Model::claimed);
    let claimed_apart = m.call(true, |r| {
        Model::claimed(r);
        r.mark_batch = None;
    });
    let marks = each(
        "push mark",
        &[
            write(calls, Some(&claimed_apart), Some(&pushed)),
            write(calls, Some(&claimed), Some(&scheduled)),
            write(calls, Some(&claimed), Some(&pushed)),
        ],
    );
    let batch_mark = item([
        ("deviceId", s(&format!("mark#{}#{}", "0".repeat(32), 1))),
        ("markedAtMs", n(1_767_250_800_000)),
        ("expireAt", n(1_800_000_000)),
    ]);
    let sent = m.call(false, |r| Model::finished(r, ReservationStatus::Sent));
    let again = m.call(true, |r| {
        r.pushes = 1;
        r.confirms = true;
        r.due_at += Duration::seconds(30);
    });
    let (failed, failed_out) = (
        m.call(true, |r| Model::finished(r, ReservationStatus::Failed)),
        m.call(false, |r| Model::finished(r, ReservationStatus::Failed)),
    );
    // A bad end's notice: its claim takes the entry out of the index, its record keeps it out,
    // its release puts it back; the row shows their table writes, then the index's apart.
    let notice_claim = write(calls, Some(&failed), Some(&failed_out));
    let notice_release = write(calls, Some(&failed_out), Some(&failed));
    let notice = each(
        "notice",
        &[
            Units {
                index: 0.0,
                ..notice_claim
            },
            write(calls, Some(&failed_out), Some(&failed_out)),
            Units {
                index: 0.0,
                ..notice_release
            },
        ],
    );
    let notice_index = each("notice's index", &[notice_claim, notice_release]).index;
    let id = &m.device.device_id;
    let agent_use = m.add(UsageRequest::AgentUse(id, day, 50, 1_800_000_000), 10);
    let plan = m.add(
        UsageRequest::PlanAnswer(&"p".repeat(32), 3, 1_800_000_000),
        1,
    );
    let spend = UsageRequest::ReserveTokens("agent#7", day, 4000, 1_000_000, 1_800_000_000);
    let model_call = m.add(spend, 500_000) + m.add(spend, 500_000);

    vec![
        row(
            "PUT /devices",
            "GetItem (strong), PutItem `devices`",
            "`deviceId`",
            "the secret's state as read (absent, `secretHash = :read`, or none), or its own new \
             `secretHash`",
            format!("{register} (twice if changed between)"),
        ),
        row(
            "POST, GET, DELETE /calls, /calls/confirm",
            "GetItem `devices` (strong): the secret",
            "`deviceId`",
            "",
            secret.to_string(),
        ),
        row(
            "POST /calls, keyed",
            "GetItem (strong) the kept answer; the tombstone",
            "`idempotency#calls#…`; `cancelled#<callId>`",
            "",
            keyed.to_string(),
        ),
        row(
            "POST /calls",
            "GetItem (eventual) the minute's count, which picks the shard",
            "`due#<minute>`",
            "",
            count_read.to_string(),
        ),
        row(
            "",
            "PutItem the reservation",
            "`deviceId`",
            "absent, expired, or another `callId`'s in a final status or stale \
             (`scheduledAtMs < staleBefore`)",
            format!(
                "{put} ({} if it replaces an indexed record)",
                replaces.index
            ),
        ),
        row(
            "",
            "UpdateItem `ADD count` `COUNT_STEP` after the put, by the creates their call id \
             picks ([the count](dispatch.md#how-a-run-works)), returning it for \
             [capacity](operations.md#capacity-ahead-of-a-peak); the put's shard is from the \
             count read before (none: shard 0, always queried): a create stopped between them \
             leaves a selectable call",
            "`due#<minute>`",
            "`lastCallId <> :callId`",
            format!("{count_write} per `COUNT_STEP` creates"),
        ),
        row(
            "",
            "UpdateItem claim the wake (under ~75 s ahead)",
            "`due#<minute>`",
            "`watchedUntil` short of the call's second",
            count_write.to_string(),
        ),
        row(
            "POST /calls, keyed",
            "PutItem the 201, kept 24 h",
            "`idempotency#calls#…`",
            "absent or expired",
            write(calls, None, Some(&m.kept_answer())).to_string(),
        ),
        row(
            "GET /calls",
            "GetItem (strong)",
            "`deviceId`",
            "",
            read(calls, &scheduled, true).to_string(),
        ),
        row(
            "DELETE /calls",
            "GetItem (strong; past grace: 409 `missed`, no write), then TransactWriteItems: \
             UpdateItem `status` = `cancelled`, REMOVE `dueShard`, PutItem the tombstone (a \
             `callId` no longer held: GetItem it)",
            "`deviceId`; `cancelled#<callId>`",
            "`callId = :callId AND status = scheduled`, no push",
            cancel_row.to_string(),
        ),
        row(
            "POST /calls/confirm",
            "UpdateItem `status` = `rang`, `pushes` at least 1, REMOVE `dueShard`",
            "`deviceId`",
            "`callId = :id` and a push that left",
            write(calls, Some(&pushed), Some(&rang)).to_string(),
        ),
        row(
            "dispatcher",
            "GetItem (eventual) each minute's count",
            "`due#<minute>`",
            "",
            count_read.to_string(),
        ),
        row(
            "",
            "UpdateItem `watchedUntil`, per minute a run stays for",
            "`due#<minute>`",
            "",
            count_write.to_string(),
        ),
        row(
            "",
            "GetItem (eventual) once per process; UpdateItem at most hourly: the sweep mark",
            "`due#swept`",
            "raised only",
            format!(
                "{}; {}",
                read(calls, &swept, false),
                write(calls, Some(&swept), Some(&swept))
            ),
        ),
        row(
            "",
            "Query `byDueShard` (eventual)",
            "`dueShard`: shard 0 with the count, then the count's others (every `w`-th in part \
             of `w`)",
            "",
            format!("{} per 4 KB", m.query_per_4_kb()),
        ),
        row(
            "",
            "GetItem `devices` (strong)",
            "`deviceId`",
            "",
            secret.to_string(),
        ),
        row(
            "",
            "UpdateItem claim (without `confirmsCalls`: naming its batch, `markBatchMs`), the \
             record returned on refusal",
            "`deviceId`",
            "[Exactly once](dispatch.md#exactly-once)",
            write(calls, Some(&scheduled), Some(&claimed)).to_string(),
        ),
        row(
            "",
            "UpdateItem push mark (`confirmsCalls`); give back; a stopped run's claim settled",
            "`deviceId`",
            "the same",
            format!("{marks} each"),
        ),
        row(
            "",
            "UpdateItem a batch's mark (one a run and 0.1 s), or a stopped run's fenced",
            "`mark#<run>#<ms>`",
            "the same",
            write(calls, None, Some(&batch_mark)).to_string(),
        ),
        row(
            "",
            "UpdateItem outcome, REMOVE `dueShard`",
            "`deviceId`",
            "the same",
            write(calls, Some(&pushed), Some(&sent)).to_string(),
        ),
        row(
            "",
            "UpdateItem outcome pushed (`confirmsCalls`): `scheduled` again, `scheduledAtMs` \
             moved",
            "`deviceId`",
            "the same, `pushes` = n − 1",
            write(calls, Some(&pushed), Some(&again)).to_string(),
        ),
        row(
            "",
            "DeleteItem a rejected token",
            "`deviceId`",
            "`voipToken = :token`",
            write(devices, Some(&device_item), None).to_string(),
        ),
        row(
            "",
            "UpdateItem notice: claim (REMOVE `dueShard`), then `noticeSentAtMs` or release \
             (`dueShard` = `noticeShard`)",
            "`deviceId`",
            "a bad end; claim free/own",
            format!("{notice} each (+{notice_index} index: release, its claim)"),
        ),
        row(
            "POST /agent round 1",
            "UpdateItem `ADD useCount`",
            "`deviceId`, JST `day`",
            "`useCount < :limit`",
            agent_use.to_string(),
        ),
        row(
            "POST /agent round 2",
            "UpdateItem `ADD useCount`",
            "`plan#<plan id>`, `answers`",
            "`useCount < 3`",
            plan.to_string(),
        ),
        row(
            "each model call",
            "UpdateItem reserve, then settle ([spend-guard.md](spend-guard.md))",
            "`spend#<api>[#k]`, JST `day`",
            "`useCount < :ceiling` (the reserve)",
            format!("{model_call} (leased: less)"),
        ),
    ]
}

/// The block: the requests' table.
pub(super) fn table() -> String {
    let mut out =
        "| who | request | key | condition | units |\n| --- | --- | --- | --- | --- |\n".to_owned();
    for row in rows() {
        out += "|";
        for cell in row {
            // An empty cell as the hand-written tables have it: `| |`.
            out += &if cell.is_empty() {
                " |".to_owned()
            } else {
                format!(" {cell} |")
            };
        }
        out += "\n";
    }
    out
}
