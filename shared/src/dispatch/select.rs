//! A run's selection requests (minute counts and shard 0, then their other shards), a bounded
//! number at once.
//!
//! The queue sends every minute's count first, then shard 0 of every minute (queried whatever
//! the count: a minute's first calls are put there before any create raises it), then shard 1, ...
//! (earlier minutes first within each round), so a minute with thousands of shards (a real
//! crowd, or a count inflated by creates that were cancelled or by a write straight into the
//! table) neither delays the few queries of the other minutes nor has more than
//! [`SELECTION_QUERIES_IN_FLIGHT`] requests out at once. Each answer is handed to the run as it
//! comes, and the run keeps starting its calls' tasks meanwhile (`run`). A request already
//! queued is not queued twice, so a slow selection's re-selections do not pile up.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use futures_util::future::{BoxFuture, FutureExt};
use futures_util::stream::{FuturesUnordered, StreamExt};

use chrono::{DateTime, Utc};

use crate::domain::due::{DueCall, Part, shards_for};
use crate::domain::reservation::minute_bucket;
use crate::store::DispatchStore;
use crate::store::StoreError;

/// The selection's requests in flight at once, per run. Each shard is a partition of its own,
/// far below DynamoDB's 3,000 RCU/s per partition (a query of 32 entries is 0.5 RCU), and 32 at
/// once read at most about 3,000 queries (1,500 RCU) a second at a ~10 ms round trip, a small
/// share of an on-demand table's default 40,000 RRU/s: a minute's 5,000 shards at most
/// (`domain::due::MAX_SHARDS`) in under 2 s. On the process's side they are a sixth of the
/// 256 MB coordinator's 202 store requests (`DISPATCH_STORE_CONCURRENCY`), whose CPU (about
/// 1.2 ms a request there, docs/reliability.md "Timeouts") they delay by at most ~40 ms: far inside
/// the dispatch client's 500 ms attempts, so the calls due meanwhile keep their second.
pub const SELECTION_QUERIES_IN_FLIGHT: usize = 32;

/// One selection request: a minute's count, or one of its shards.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct Query {
    /// The queue's order: 0 for the count, `k + 1` for shard `k`.
    rank: u32,
    pub(super) minute: String,
}

impl Query {
    fn count(minute: String) -> Query {
        Query { rank: 0, minute }
    }

    fn shard(minute: &str, shard: u32) -> Query {
        Query {
            rank: shard + 1,
            minute: minute.to_owned(),
        }
    }

    /// The shard this request queries (`None`: the minute's count).
    pub(super) fn shard_index(&self) -> Option<u32> {
        self.rank.checked_sub(1)
    }
}

/// What a request found.
#[derive(Debug)]
pub(super) enum Found {
    Count(u32),
    Calls(Vec<DueCall>),
}

pub(super) type Answer = (Query, Result<Found, StoreError>);

type Request = Box<dyn Fn(&Query) -> BoxFuture<'static, Result<Found, StoreError>> + Send + Sync>;

/// The queue and the requests in flight of one run's selections.
pub(super) struct Selection {
    request: Request,
    part: Part,
    limit: usize,
    queued: BTreeSet<Query>,
    /// In flight: a request queued again meanwhile waits until this one has answered.
    running: HashSet<Query>,
    in_flight: FuturesUnordered<BoxFuture<'static, Answer>>,
}

impl Selection {
    /// The selection of `part` of every minute's shards from `store`.
    pub(super) fn of_store(store: Arc<dyn DispatchStore>, part: Part) -> Selection {
        Selection::new(part, SELECTION_QUERIES_IN_FLIGHT, move |q: &Query| {
            let (store, q) = (store.clone(), q.clone());
            async move {
                match q.shard_index() {
                    None => store.due_count(&q.minute).await.map(Found::Count),
                    Some(shard) => store.due_calls(&q.minute, shard).await.map(Found::Calls),
                }
            }
            .boxed()
        })
    }

    fn new(
        part: Part,
        limit: usize,
        request: impl Fn(&Query) -> BoxFuture<'static, Result<Found, StoreError>>
        + Send
        + Sync
        + 'static,
    ) -> Selection {
        Selection {
            request: Box::new(request),
            part,
            limit: limit.max(1),
            queued: BTreeSet::new(),
            running: HashSet::new(),
            in_flight: FuturesUnordered::new(),
        }
    }

    /// Selects `minutes` (again): queues their counts and (if this part has it) their shard 0,
    /// which holds a minute's calls before its count exists; each count's answer queues the
    /// other shards.
    pub(super) fn cover(&mut self, minutes: Vec<String>) {
        let first = self.part.shards(1).next().is_some();
        for minute in minutes {
            if first {
                self.queued.insert(Query::shard(&minute, 0));
            }
            self.queued.insert(Query::count(minute));
        }
        self.send();
    }

    /// Sends nothing more (the run's window has passed); the requests in flight still answer.
    pub(super) fn stop(&mut self) {
        self.queued.clear();
    }

    /// Whether nothing is queued or in flight.
    pub(super) fn is_idle(&self) -> bool {
        self.queued.is_empty() && self.in_flight.is_empty()
    }

    /// The next answer (a count's answer has queued the minute's other shards by then). Never
    /// returns while the selection is idle.
    pub(super) async fn next(&mut self) -> Answer {
        self.send();
        let Some((query, answer)) = self.in_flight.next().await else {
            return std::future::pending().await;
        };
        self.running.remove(&query);
        if let (None, Ok(Found::Count(count))) = (query.shard_index(), &answer) {
            let shards = self.part.shards(shards_for(*count)).filter(|&s| s > 0);
            self.queued
                .extend(shards.map(|shard| Query::shard(&query.minute, shard)));
        }
        self.send();
        (query, answer)
    }

    /// Sends queued requests, first in the queue's order, while fewer than the limit are in
    /// flight.
    fn send(&mut self) {
        while self.in_flight.len() < self.limit {
            let Some(next) = self
                .queued
                .iter()
                .find(|q| !self.running.contains(q))
                .cloned()
            else {
                break;
            };
            self.queued.remove(&next);
            self.running.insert(next.clone());
            let answer = (self.request)(&next);
            self.in_flight
                .push(async move { (next, answer.await) }.boxed());
        }
    }
}

/// The minute buckets whose minute overlaps `[from, until)`, oldest first.
pub fn buckets(from: DateTime<Utc>, until: DateTime<Utc>) -> Vec<String> {
    let first = from.timestamp().div_euclid(60) * 60;
    let mut minute = DateTime::from_timestamp(first, 0).expect("a representable minute");
    let mut out = Vec::new();
    while minute < until {
        out.push(minute_bucket(minute));
        minute += chrono::Duration::minutes(1);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// A selection whose counts are `counts` (by minute, 0 if absent), each request taking
    /// `latency` (paused time), recording the order requests went out and the most in flight.
    struct Fake {
        sent: Arc<Mutex<Vec<Query>>>,
        most: Arc<AtomicUsize>,
    }

    fn fake(counts: &[(&str, u32)], limit: usize, latency: Duration) -> (Selection, Fake) {
        let counts: Vec<(String, u32)> = counts.iter().map(|(m, c)| (m.to_string(), *c)).collect();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let fake = Fake {
            sent: sent.clone(),
            most: most.clone(),
        };
        let selection = Selection::new(Part::WHOLE, limit, move |q: &Query| {
            sent.lock().unwrap().push(q.clone());
            let in_flight = now.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(in_flight, Ordering::SeqCst);
            let count = counts
                .iter()
                .find(|(m, _)| *m == q.minute)
                .map_or(0, |c| c.1);
            let (now, q) = (now.clone(), q.clone());
            async move {
                tokio::time::sleep(latency).await;
                now.fetch_sub(1, Ordering::SeqCst);
                Ok(match q.shard_index() {
                    None => Found::Count(count),
                    Some(_) => Found::Calls(Vec::new()),
                })
            }
            .boxed()
        });
        (selection, fake)
    }

    async fn drain(selection: &mut Selection) -> Vec<Answer> {
        let mut answers = Vec::new();
        while !selection.is_idle() {
            answers.push(selection.next().await);
        }
        answers
    }

    #[tokio::test(start_paused = true)]
    async fn an_inflated_minute_is_queried_a_bounded_number_at_a_time_after_the_others() {
        let minutes = [
            "2026-01-01T00:00Z",
            "2026-01-01T00:01Z",
            "2026-01-01T00:02Z",
        ];
        let counts = [(minutes[0], 40), (minutes[1], 10_000), (minutes[2], 1)];
        let (mut selection, fake) = fake(&counts, 8, Duration::from_millis(10));
        selection.cover(minutes.iter().map(|m| m.to_string()).collect());
        let answers = drain(&mut selection).await;
        // Three counts and three shards 0, then the shards past 0: one, 312, none.
        assert_eq!(answers.len(), 3 + 3 + 1 + 312, "every count and shard once");
        assert_eq!(
            fake.most.load(Ordering::SeqCst),
            8,
            "never more than the limit"
        );
        let sent = fake.sent.lock().unwrap().clone();
        // The other minutes' shards wait at most for a place in flight to free up, however
        // many the crowd has queued (the counts answer one by one: a crowd counted first fills
        // the places, the others' shards go first into the next free ones).
        let last_other = sent.iter().rposition(|q| q.minute != minutes[1]).unwrap();
        assert!(last_other < 3 + 2 * 8, "{:?}", &sent[..20]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_costs_the_first_selection_one_store_timeout() {
        let minutes = crate::dispatch::buckets(
            chrono::DateTime::from_timestamp(5, 0).unwrap(),
            chrono::DateTime::from_timestamp(600, 0).unwrap(),
        );
        assert_eq!(minutes.len(), 10);
        let mut selection = Selection::new(Part::WHOLE, SELECTION_QUERIES_IN_FLIGHT, |_| {
            async {
                tokio::time::sleep(crate::store::dynamodb::OPERATION_TIMEOUT).await;
                Err(StoreError::new("connection refused"))
            }
            .boxed()
        });
        let started = tokio::time::Instant::now();
        selection.cover(minutes);
        let answers = drain(&mut selection).await;
        assert_eq!(answers.len(), 20, "each minute's count and shard 0");
        assert!(answers.iter().all(|(_, a)| a.is_err()));
        assert_eq!(
            started.elapsed(),
            crate::store::dynamodb::OPERATION_TIMEOUT,
            "all the counts and shards 0 at once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_queued_again_is_not_sent_twice_at_once() {
        let minute = "2026-01-01T00:00Z";
        let (mut selection, fake) = fake(&[(minute, 40)], 4, Duration::from_millis(10));
        selection.cover(vec![minute.into()]);
        selection.cover(vec![minute.into()]);
        assert_eq!(
            fake.sent.lock().unwrap().len(),
            2,
            "one count and one shard 0 in flight"
        );
        let answers = drain(&mut selection).await;
        // The count and shard 0 twice, one after the other, and shard 1 after each count.
        assert_eq!(answers.len(), 6, "{answers:?}");
        assert!(fake.most.load(Ordering::SeqCst) <= 3);
    }

    #[tokio::test(start_paused = true)]
    async fn shard_0_is_queried_without_a_count_and_only_by_the_part_that_has_it() {
        let minute = "2026-01-01T00:00Z";
        let (mut selection, fake) = fake(&[], 4, Duration::from_millis(10));
        selection.cover(vec![minute.into()]);
        let answers = drain(&mut selection).await;
        let queried: Vec<Option<u32>> = answers.iter().map(|(q, _)| q.shard_index()).collect();
        assert_eq!(queried.len(), 2, "{queried:?}");
        assert!(queried.contains(&None) && queried.contains(&Some(0)));
        assert_eq!(fake.sent.lock().unwrap().len(), 2);

        // Part 1 of 2 has shards 1, 3, ...: its count, and shard 1 once the count says so.
        let counts = Arc::new(Mutex::new(Vec::new()));
        let seen = counts.clone();
        let mut part = Selection::new(Part::new(1, 2).unwrap(), 4, move |q: &Query| {
            seen.lock().unwrap().push(q.clone());
            let q = q.clone();
            async move {
                Ok(match q.shard_index() {
                    None => Found::Count(64),
                    Some(_) => Found::Calls(Vec::new()),
                })
            }
            .boxed()
        });
        part.cover(vec![minute.into()]);
        drain(&mut part).await;
        let shards: Vec<Option<u32>> = counts
            .lock()
            .unwrap()
            .iter()
            .map(Query::shard_index)
            .collect();
        assert_eq!(shards, [None, Some(1)]);
    }
}
