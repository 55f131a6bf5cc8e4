//! `bench/strict-apns.sh`'s binary (issue 48): N calls due in one second through the dispatcher
//! and the production APNs client (`ApnsSender` connections in a `PushPool` of
//! `APNS_MAX_CONNECTIONS`' default size, as `app::wiring::push` builds it for `APNS_ENDPOINT`) to
//! the strict stand-in (`koe_testkit::push::strict`): its stream limit of 1,000 on connect, 1 after
//! each rejected push until a success, `--dead-every`-th call's token dead (410 `Unregistered`,
//! spread through the second), one graceful GOAWAY whose last stream id is the `--go-away-at`-th
//! stream (mid-second), answers after `--latency-ms` with `--tail-share` taking `--tail-ms` more;
//! otherwise as the outside server of issue 58 (`StrictSettings::outside`: GOAWAY
//! `ENHANCE_YOUR_CALM` at the first stream past an acknowledged limit, deaf after its graceful
//! GOAWAY, closed 1.15 s later).
//!
//! The store is the in-memory one (no limits model: what is measured is the push path). The
//! minute is split as deployed (parts of `--calls-per-worker` calls): each part a dispatcher of
//! its own with a pool of its own, as its own Lambda invocation would have, here tasks of one
//! process sharing its runtime.
//!
//! Prints, per call, how many times the stand-in received (processed) its push beside the
//! outcome the dispatcher recorded, as a table (outcome × times received), the lateness of the
//! live-token calls' pushes (when the stand-in read each, after its `scheduledAt`), and one
//! `RESULT key=value ...` line. `--per-call FILE` writes every call's line (TSV).
//!
//! ```sh
//! bench-strict-apns [--calls 10000] [--dead-every 50] [--go-away-at N] [--latency-ms 150]
//!     [--tail-share 0.01] [--tail-ms 500] [--calls-per-worker 5000] [--per-call FILE]
//! ```

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use koe::dispatch::trigger::{DispatchTrigger, TriggerError};
use koe::dispatch::{Dispatcher, RunCause, RunReport};
use koe::domain::device::{Device, DeviceId};
use koe::domain::due::Part;
use koe::domain::reservation::ReservationStatus;
use koe::platform::clock::SystemClock;
use koe::platform::config::dispatch::store_concurrency_for;
use koe::platform::config::{Config, DEFAULT_APNS_MAX_CONNECTIONS, DispatchConfig, Vars};
use koe::push::{Notice, PushError, PushSender, VoipPush};
use koe::store::memory::MemoryStore;
use koe::store::prelude::*;
use koe_bench::{percentile, seed_call};
use koe_testkit::push::strict::{Fate, StrictApns, StrictSettings};
use tokio::task::JoinHandle;

const USAGE: &str = "bench-strict-apns [--calls N] [--dead-every K] [--go-away-at N] \
                     [--latency-ms MS] [--tail-share F] [--tail-ms MS] [--calls-per-worker N] \
                     [--per-call FILE]";

struct Options {
    calls: usize,
    /// Every `dead_every`-th call (from the 25th of each such run) goes to a dead token.
    dead_every: usize,
    /// The stream (counted over every connection, from the first) whose id is the GOAWAY's last.
    go_away_at: Option<u64>,
    latency_ms: u64,
    tail_share: f64,
    tail_ms: u64,
    calls_per_worker: u32,
    per_call: Option<String>,
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        calls: 10_000,
        dead_every: 50,
        go_away_at: None,
        latency_ms: 150,
        tail_share: 0.01,
        tail_ms: 500,
        calls_per_worker: 5_000,
        per_call: None,
    };
    for (flag, value) in koe_bench::flag_pairs()? {
        let bad = || format!("{flag}: not a number");
        match flag.as_str() {
            "--calls" => o.calls = value.parse().map_err(|_| bad())?,
            "--dead-every" => o.dead_every = value.parse().map_err(|_| bad())?,
            "--go-away-at" => o.go_away_at = Some(value.parse().map_err(|_| bad())?),
            "--latency-ms" => o.latency_ms = value.parse().map_err(|_| bad())?,
            "--tail-share" => o.tail_share = value.parse().map_err(|_| bad())?,
            "--tail-ms" => o.tail_ms = value.parse().map_err(|_| bad())?,
            "--calls-per-worker" => o.calls_per_worker = value.parse().map_err(|_| bad())?,
            "--per-call" => o.per_call = Some(value),
            _ => return Err(format!("bad option {flag} {value}")),
        }
    }
    if o.calls == 0 || o.dead_every == 0 {
        return Err("--calls and --dead-every must be at least 1".into());
    }
    Ok(o)
}

/// What the client answered the dispatcher for one push attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Accepted,
    DeadToken,
    /// `Retryable` without a status: the client says it never left.
    NotSent,
    /// `Retryable` with a status (429, 5xx).
    Retryable,
    /// The client says it may have been delivered.
    MaybeDelivered,
    Rejected,
    /// The dispatcher dropped the attempt before the client answered (its push budget ended):
    /// the dispatcher records it as maybe delivered.
    CutOff,
}

/// One attempt: the client's answer, and when it started and ended.
#[derive(Debug, Clone)]
struct Try {
    answer: Answer,
    started: DateTime<Utc>,
    ended: DateTime<Utc>,
    /// Why, for a push the client says never left or may have been delivered.
    reason: Option<Arc<str>>,
}

type Answers = Arc<Mutex<HashMap<String, Vec<Try>>>>;

/// The pool as the dispatcher sees it, noting each attempt's answer per call id.
struct Watched {
    pool: Arc<dyn PushSender>,
    answers: Answers,
}

/// Notes `CutOff` unless the attempt came back.
struct Attempt<'a> {
    answers: &'a Answers,
    call_id: &'a str,
    started: DateTime<Utc>,
    answered: bool,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if !self.answered {
            note(
                self.answers,
                self.call_id,
                (Answer::CutOff, None),
                self.started,
            );
        }
    }
}

fn note(
    answers: &Answers,
    call_id: &str,
    (answer, reason): (Answer, Option<Arc<str>>),
    started: DateTime<Utc>,
) {
    let ended = Utc::now();
    let mut answers = answers.lock().unwrap();
    let tried = Try {
        answer,
        started,
        ended,
        reason,
    };
    answers.entry(call_id.to_owned()).or_default().push(tried);
}

#[async_trait]
impl PushSender for Watched {
    async fn send(&self, push: &VoipPush, device: &Device) -> Result<(), PushError> {
        let mut attempt = Attempt {
            answers: &self.answers,
            call_id: &push.call_id,
            started: Utc::now(),
            answered: false,
        };
        let result = self.pool.send(push, device).await;
        attempt.answered = true;
        let answer = match &result {
            Ok(()) => Answer::Accepted,
            Err(PushError::InvalidToken { .. }) => Answer::DeadToken,
            Err(PushError::Retryable { status: None, .. }) => Answer::NotSent,
            Err(PushError::Retryable { .. }) => Answer::Retryable,
            Err(PushError::MaybeDelivered { .. }) => Answer::MaybeDelivered,
            Err(PushError::Rejected { .. }) => Answer::Rejected,
        };
        let reason = match (&result, answer) {
            (Err(e), Answer::NotSent | Answer::MaybeDelivered) => Some(e.reason().into()),
            _ => None,
        };
        note(
            &self.answers,
            &push.call_id,
            (answer, reason),
            attempt.started,
        );
        result
    }

    async fn send_notice(&self, notice: Notice<'_>) -> Result<(), PushError> {
        self.pool.send_notice(notice).await
    }

    async fn warm(&self) {
        self.pool.warm().await;
    }

    async fn prepare(&self, expected_in_second: usize) {
        self.pool.prepare(expected_in_second).await;
    }

    fn headroom(&self) -> Option<usize> {
        self.pool.headroom()
    }
}

/// What every dispatcher of the run shares: the store, the stand-in's address, the answers.
#[derive(Clone)]
struct Wiring {
    store: Arc<MemoryStore>,
    apns: std::net::SocketAddr,
    answers: Answers,
}

impl Wiring {
    /// A dispatcher with a pool of its own, as production wires one to `APNS_ENDPOINT`.
    fn dispatcher(&self, settings: DispatchConfig) -> Dispatcher {
        let pool = koe_testkit::push::production_pool(self.apns);
        let push = Arc::new(Watched {
            pool: Arc::new(pool),
            answers: self.answers.clone(),
        });
        let store: Arc<dyn Store> = self.store.clone();
        Dispatcher::new(store, push, Arc::new(SystemClock), settings, "bench")
    }
}

/// Runs each handed-out part as a dispatcher of its own (its own pool), in this process.
struct InProcessParts {
    wiring: Wiring,
    settings: DispatchConfig,
    started: Mutex<Vec<JoinHandle<RunReport>>>,
}

#[async_trait]
impl DispatchTrigger for InProcessParts {
    async fn request_run(&self) -> Result<(), TriggerError> {
        Err(TriggerError("not used".into()))
    }

    async fn hand_out(&self, parts: &[Part]) -> Result<(), TriggerError> {
        for part in parts {
            let dispatcher = self.wiring.dispatcher(self.settings.clone());
            let part = *part;
            let run = tokio::spawn(async move { dispatcher.run_part(RunCause::Part, part).await });
            self.started.lock().unwrap().push(run);
        }
        Ok(())
    }
}

/// The deployed functions' memory (template.yaml), which sets their store concurrency.
const COORDINATOR_MB: u64 = 256;
const PART_MB: u64 = 1769;

fn settings(o: &Options, last: DateTime<Utc>, memory_mb: u64) -> DispatchConfig {
    let mut settings = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
    settings.window = (last - Utc::now() + chrono::Duration::seconds(3))
        .to_std()
        .expect("the window is ahead");
    settings.calls_per_worker = o.calls_per_worker;
    // The part function's (template.yaml: DISPATCH_CONCURRENCY is DispatchCallsPerWorker).
    settings.concurrency = o.calls_per_worker as usize;
    settings.store_concurrency = store_concurrency_for(Some(memory_mb));
    settings
}

/// One call as seeded and as it ended.
struct Call {
    call_id: String,
    dead: bool,
    due: DateTime<Utc>,
    received: usize,
    first_received: Option<DateTime<Utc>>,
    /// Each push the stand-in processed: its connection and when it arrived.
    receipts: Vec<(usize, DateTime<Utc>)>,
    outcome: String,
    answers: Vec<Try>,
}

impl Call {
    fn ms(&self, t: DateTime<Utc>) -> i64 {
        (t - self.due).num_milliseconds()
    }

    /// "connection 3 at 12 ms, ..." (after the call's second).
    fn receipts(&self) -> String {
        let each = self.receipts.iter();
        let each: Vec<String> = each
            .map(|(c, at)| format!("connection {c} at {} ms", self.ms(*at)))
            .collect();
        each.join(", ")
    }

    /// "Accepted 10..135 ms, ..." (after the call's second).
    fn tries(&self) -> String {
        let each = self.answers.iter().map(|t| {
            let (from, to) = (self.ms(t.started), self.ms(t.ended));
            let why = t.reason.as_deref().map(|r| format!(" ({r})"));
            format!("{:?} {from}..{to} ms{}", t.answer, why.unwrap_or_default())
        });
        each.collect::<Vec<_>>().join(", ")
    }
}

/// The recorded outcome: the reservation's status, a failure told by the client's last answer
/// (an unknown push state is `failed` with a maybe-delivered or cut-off last attempt).
fn outcome(status: Option<ReservationStatus>, answers: &[Try]) -> String {
    let Some(status) = status else {
        return "gone".into();
    };
    if status != ReservationStatus::Failed {
        return status.as_str().into();
    }
    let why = match answers.last().map(|t| t.answer) {
        Some(Answer::DeadToken) => "dead token",
        Some(Answer::MaybeDelivered) => "unknown (client: no answer)",
        Some(Answer::CutOff) => "unknown (cut at the push budget)",
        Some(Answer::NotSent) => "not sent",
        Some(Answer::Retryable) => "429/5xx",
        Some(Answer::Rejected) => "rejected",
        Some(Answer::Accepted) | None => "other",
    };
    format!("failed: {why}")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let Some(o) = koe_bench::parsed(parse_args(), "bench-strict-apns", Some(USAGE)) else {
        return ExitCode::from(2);
    };
    let apns = StrictApns::start(StrictSettings {
        latency: Duration::from_millis(o.latency_ms),
        tail_share: o.tail_share,
        tail: Duration::from_millis(o.tail_ms),
        ..StrictSettings::outside()
    })
    .await;
    // The run starts the longest planned lead (and 3 s) ahead of the second, as the
    // every-minute schedule starts it ahead of a round minute.
    let lead = koe::dispatch::plan::LONGEST_LEAD + chrono::Duration::seconds(3);
    let t0 = DateTime::from_timestamp((Utc::now() + lead).timestamp() + 1, 0).unwrap();
    let made = t0 - chrono::Duration::hours(1);
    let store = Arc::new(MemoryStore::new());
    let mut calls = Vec::with_capacity(o.calls);
    for i in 0..o.calls {
        let due = t0 + chrono::Duration::milliseconds((i * 1000 / o.calls) as i64);
        let r = seed_call(&store, i, due, made, false).await;
        let dead = i % o.dead_every == o.dead_every / 2;
        if dead {
            apns.unregister(&format!("{i:064x}"));
        }
        calls.push(Call {
            call_id: r.call_id.as_str().to_owned(),
            dead,
            due,
            received: 0,
            first_received: None,
            receipts: Vec::new(),
            outcome: String::new(),
            answers: Vec::new(),
        });
    }
    let go_away_at = o.go_away_at.unwrap_or(o.calls as u64 / 2);
    apns.go_away_after(go_away_at);

    let wiring = Wiring {
        store: store.clone(),
        apns: apns.addr,
        answers: Answers::default(),
    };
    let last = t0 + chrono::Duration::seconds(1);
    let parts = Arc::new(InProcessParts {
        wiring: wiring.clone(),
        settings: settings(&o, last, PART_MB),
        started: Mutex::new(Vec::new()),
    });
    let coordinator = wiring
        .dispatcher(settings(&o, last, COORDINATOR_MB))
        .fanning_out(parts.clone());
    let stalls = tokio::spawn(watch(
        t0 - chrono::Duration::seconds(1),
        last + chrono::Duration::seconds(1),
    ));
    let mut reports = vec![coordinator.coordinate(RunCause::Schedule).await];
    let started = std::mem::take(&mut *parts.started.lock().unwrap());
    let handed_out = started.len();
    for run in started {
        reports.push(run.await.expect("a part's run"));
    }

    // What the stand-in received, beside what was recorded.
    let seen = apns.seen();
    let mut by_call: HashMap<&str, Vec<(usize, DateTime<Utc>)>> = HashMap::new();
    for s in seen.iter().filter(|s| s.fate.processed()) {
        let receipts = by_call.entry(s.call_id.as_str()).or_default();
        receipts.push((s.connection, s.at));
    }
    let answers = std::mem::take(&mut *wiring.answers.lock().unwrap());
    let now = Utc::now();
    for (i, call) in calls.iter_mut().enumerate() {
        call.receipts = by_call.remove(call.call_id.as_str()).unwrap_or_default();
        call.received = call.receipts.len();
        call.first_received = call.receipts.iter().map(|(_, at)| *at).min();
        call.answers = answers.get(&call.call_id).cloned().unwrap_or_default();
        let device = DeviceId::parse("deviceId", &format!("d{i:07}")).unwrap();
        let status = store
            .get_reservation(&device, now)
            .await
            .expect("the memory store answers")
            .map(|r| r.status);
        call.outcome = outcome(status, &call.answers);
    }
    let watched = stalls.await.expect("the watch");
    report(
        &o,
        &apns,
        &calls,
        &reports,
        (handed_out, go_away_at),
        watched,
    );
    ExitCode::SUCCESS
}

fn report(
    o: &Options,
    apns: &StrictApns,
    calls: &[Call],
    reports: &[RunReport],
    (handed_out, go_away_at): (usize, u64),
    watched: Watch,
) {
    let seen = apns.seen();
    let count = |fate: Fate| seen.iter().filter(|s| s.fate == fate).count();
    let rejected = seen
        .iter()
        .filter(|s| matches!(s.fate, Fate::Rejected(_)))
        .count();
    let total = |f: fn(&RunReport) -> u32| reports.iter().map(f).sum::<u32>();

    // Outcome recorded × times received, live and dead tokens apart.
    let mut table: BTreeMap<(bool, &str), [usize; 4]> = BTreeMap::new();
    for c in calls {
        table.entry((c.dead, c.outcome.as_str())).or_default()[c.received.min(3)] += 1;
    }
    println!(
        "{} calls due in one second (in-memory store, no limits model), {} of them to dead \
         tokens; strict stand-in: 1,000 streams on connect, 1 after a rejection until a success, \
         a graceful GOAWAY at stream {go_away_at}, answers in {} ms ({} % take {} ms more); parts \
         of {}, each with a pool of {} connections",
        calls.len(),
        calls.iter().filter(|c| c.dead).count(),
        o.latency_ms,
        o.tail_share * 100.0,
        o.tail_ms,
        o.calls_per_worker,
        DEFAULT_APNS_MAX_CONNECTIONS,
    );
    println!();
    println!("| token | outcome recorded | received 0 | 1 | 2 | 3+ |");
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    for ((dead, outcome), n) in &table {
        let token = if *dead { "dead" } else { "live" };
        println!(
            "| {token} | {outcome} | {} | {} | {} | {} |",
            n[0], n[1], n[2], n[3]
        );
    }
    let mut lateness: Vec<f64> = calls
        .iter()
        .filter(|c| !c.dead)
        .filter_map(|c| c.first_received.map(|t| t - c.due))
        .map(|d| d.num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0)
        .collect();
    lateness.sort_by(f64::total_cmp);
    let (p50, p99, max) = (
        percentile(&lateness, 50),
        percentile(&lateness, 99),
        lateness.last().copied().unwrap_or(f64::NAN),
    );
    println!();
    println!(
        "live-token calls, received after their second: p50 {p50:.0} ms, p99 {p99:.0} ms, max \
         {max:.0} ms ({} received)",
        lateness.len()
    );
    let live_not_once = calls.iter().filter(|c| !c.dead && c.received != 1).count();
    let failed_unreceived = calls
        .iter()
        .filter(|c| c.received == 0 && c.outcome.starts_with("failed"))
        .count();
    let goals = live_not_once == 0 && failed_unreceived == 0 && p99 <= 1000.0;
    println!(
        "goals ({}): live-token calls not received exactly once {live_not_once}; recorded \
         failed or unknown yet never received {failed_unreceived}; p99 ≤ 1,000 ms",
        if goals { "met" } else { "NOT met" }
    );
    // The calls the goals are about, each beside its answers.
    let odd: Vec<&Call> = calls
        .iter()
        .filter(|c| (!c.dead && (c.received != 1 || c.outcome != "sent")) || c.received > 1)
        .collect();
    for c in odd.iter().take(20) {
        println!(
            "  {} {} received {} ({}) recorded {:?}, attempts {}",
            c.call_id,
            if c.dead { "dead" } else { "live" },
            c.received,
            c.receipts(),
            c.outcome,
            c.tries()
        );
    }
    if odd.len() > 20 {
        println!("  ... and {} more", odd.len() - 20);
    }
    let ended = apns.ended_in_error();
    if !ended.is_empty() {
        println!("connections that ended in an error: {ended:?}");
    }
    if let Some(path) = &o.per_call {
        let mut out = String::from("call_id\ttoken\treceived\trecorded\treceipts\tattempts\n");
        for c in calls {
            out.push_str(&format!(
                "{}\t{}\t{}\t{}\t{}\t{}\n",
                c.call_id,
                if c.dead { "dead" } else { "live" },
                c.received,
                c.outcome,
                c.receipts(),
                c.tries()
            ));
        }
        std::fs::write(path, out).expect("write --per-call");
    }
    println!(
        "the process from 1 s before the second to 1 s after it: {:.2} s of CPU in {:.1} s; its \
         runtime's longest stall {} ms (a task asking to wake every 5 ms)",
        watched.cpu_s, watched.wall_s, watched.longest_stall_ms
    );
    println!(
        "RESULT calls={} dead={} parts={handed_out} sent={} failed={} push_unknown={} \
         dead_tokens={} released={} lost={} missed={} store_errors={} p50_ms={p50:.1} \
         p99_ms={p99:.1} max_ms={max:.1} live_not_once={live_not_once} \
         failed_unreceived={failed_unreceived} connections={} go_aways={} refused={} \
         above_go_away={} rejected={rejected} cpu_s={:.2} longest_stall_ms={} goals={}",
        calls.len(),
        calls.iter().filter(|c| c.dead).count(),
        total(|r| r.sent),
        total(|r| r.failed),
        total(|r| r.push_unknown),
        total(|r| r.dead_tokens),
        total(|r| r.released),
        total(|r| r.lost),
        total(|r| r.missed),
        total(|r| r.store_errors),
        apns.connections(),
        apns.go_aways(),
        count(Fate::Refused),
        count(Fate::AboveGoAway),
        watched.cpu_s,
        watched.longest_stall_ms,
        if goals { "met" } else { "not_met" },
    );
}

/// How the process fared around the second: its CPU time, and its runtime's longest stall.
struct Watch {
    cpu_s: f64,
    wall_s: f64,
    longest_stall_ms: u128,
}

/// Watches the process from `from` to `until` (wall clock): a machine shared with other work
/// shows here (little CPU yet long stalls: the process was not scheduled).
async fn watch(from: DateTime<Utc>, until: DateTime<Utc>) -> Watch {
    let wait = |at: DateTime<Utc>| (at - Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(wait(from)).await;
    let (cpu_before, started) = (cpu_seconds(), std::time::Instant::now());
    let mut longest = Duration::ZERO;
    while Utc::now() < until {
        let asked = std::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(5)).await;
        longest = longest.max(asked.elapsed().saturating_sub(Duration::from_millis(5)));
    }
    Watch {
        cpu_s: cpu_seconds() - cpu_before,
        wall_s: started.elapsed().as_secs_f64(),
        longest_stall_ms: longest.as_millis(),
    }
}

/// The process's user and system CPU time so far (`/proc/self/stat`, in USER_HZ = 100 ticks).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}
