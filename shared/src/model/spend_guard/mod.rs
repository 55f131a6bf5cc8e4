//! The spend guard: a ceiling of model tokens per Japan day for each public API, around the
//! `ModelProvider` port.
//!
//! Before a completion goes out, its tokens (the prompt's estimate and the whole `max_tokens`)
//! are reserved against the day's count: from a block the guard leased from one of the count's
//! shards with one conditional `ADD`, or near the end with an `ADD` of the call's own tokens
//! while the shard is below its share ([`lease`]), so concurrent calls can never together pass
//! a shard's share by more than one call. After it, the count is corrected to the usage the
//! provider reported, and a streamed reply cut short (an error, a client gone) to what it is
//! known to have cost: its prompt and the pieces it received (docs/spend-guard.md). Once every
//! shard is full every completion is refused (503 `SPEND_CEILING_REACHED`, no model call)
//! until 00:00 Japan time, and the first refusal of the day, one atomic claim in the store, is
//! the one that notifies the team. A throttled counter refuses the call (503 with
//! `Retry-After`): let through uncounted, a flood passes the ceiling. A counter that does not
//! answer lets the call go ahead with a warning (fail-open, as the agent's daily limit: an
//! outage must not take chat down), its tokens held by the guard and added to the next write
//! that answers.

use std::sync::Arc;

pub mod lease;
mod stream;
pub use lease::LeasePlan;
use lease::{Block, Lease, Want, shard_counter};
pub use stream::{GuardedStream, Held};

use async_trait::async_trait;

use crate::domain::usage_day::UsageDay;
use crate::model::{ModelProvider, ModelReply, ModelRequest, ProviderError};
use crate::platform::clock::Clock;
use crate::platform::metrics::catalogue::API;
use crate::platform::metrics::{Metrics, Record};
use crate::store::{SpendOutcome, StoreError, UsageStore};

#[cfg(test)]
mod tests;

/// The most tokens a model's context holds (gpt-4o, gpt-4o-mini: 128k): no prompt counts more.
pub const MODEL_CONTEXT_TOKENS: u64 = 128_000;
/// Tokens a chat message costs beyond its text (role, separators), generously.
const TOKENS_PER_MESSAGE: u64 = 8;
/// Tokens of the reply's priming and of the request around the messages, generously.
const TOKENS_PER_REQUEST: u64 = 16;
/// ASCII characters counted as one token: English averages about four a token in OpenAI's
/// tokenizers (cl100k, o200k), code and symbols fewer; three is on the generous side.
const ASCII_CHARS_PER_TOKEN: u64 = 3;

/// Which public API a guard counts for: `chat` or `agent` (the store's counter name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpendApi {
    Chat,
    Agent,
}

impl SpendApi {
    pub fn as_str(self) -> &'static str {
        match self {
            SpendApi::Chat => "chat",
            SpendApi::Agent => "agent",
        }
    }
}

/// The tokens `text` is taken to cost, by character class: an ASCII character a third of a
/// token, any other character one (Japanese averages under one token a character; the rare
/// emoji or rare script that costs more is outweighed by the generous ASCII rate). An estimate
/// of what a provider bills, not a bound: its documented error is in docs/spend-guard.md.
pub fn text_tokens(text: &str) -> u64 {
    let ascii = text.bytes().filter(u8::is_ascii).count() as u64;
    let other = text.chars().filter(|c| !c.is_ascii()).count() as u64;
    ascii.div_ceil(ASCII_CHARS_PER_TOKEN) + other
}

/// The prompt's estimated tokens: each message's text and framing, a structured-output
/// schema, the request's framing; never more than the model's context.
pub fn prompt_tokens(request: &ModelRequest) -> u64 {
    let messages: u64 = request
        .messages
        .iter()
        .map(|m| text_tokens(&m.content) + TOKENS_PER_MESSAGE)
        .sum();
    let schema = request
        .response_format
        .as_ref()
        .map_or(0, |f| text_tokens(&f.to_string()));
    (messages + schema + TOKENS_PER_REQUEST).min(MODEL_CONTEXT_TOKENS)
}

/// What a call reserves before it goes out: its prompt's estimate and the whole completion it
/// may ask for (`max_tokens`).
pub fn token_bound(request: &ModelRequest) -> u64 {
    prompt_tokens(request) + u64::from(request.max_tokens)
}

/// One API's daily ceiling: the reservation before a model call, its correction after, and
/// the refusal past the ceiling. Shared by the completion and streaming guards. One guard per
/// container: it leases from sharded counters ([`lease`]).
pub struct SpendGuard {
    store: Arc<dyn UsageStore>,
    clock: Arc<dyn Clock>,
    api: SpendApi,
    ceiling: u64,
    plan: LeasePlan,
    /// Held across a lease's read and write, so that a container's concurrent calls lease one
    /// block.
    lease: tokio::sync::Mutex<Lease>,
    /// The day whose ceiling notice this guard has claimed, or seen claimed.
    noticed: std::sync::Mutex<Option<String>>,
    /// `SpendUsed` at each reservation, `ModelTokens` at each settlement, `ProviderErrors`.
    metrics: Metrics,
}

/// Tokens reserved for one model call, still to be corrected to its usage.
pub struct Reserved {
    day: UsageDay,
    bound: u64,
    /// The prompt's estimate: what a call cut short is taken to have cost at least.
    prompt: u64,
    /// The shard a call that leased its own tokens is settled on at once; `None`: reserved
    /// from the guard's block, settled into it.
    own: Option<u32>,
}

impl Reserved {
    pub fn bound(&self) -> u64 {
        self.bound
    }

    pub fn prompt(&self) -> u64 {
        self.prompt
    }
}

/// A write to a shard's counter decided under the lease's lock, made after it.
struct Correction {
    day: UsageDay,
    shard: u32,
    delta: i64,
}

/// Seconds a call refused for a throttled counter is told to wait (`Retry-After`).
pub const COUNTER_BUSY_RETRY_SECS: u64 = 1;

impl SpendGuard {
    pub fn new(
        store: Arc<dyn UsageStore>,
        clock: Arc<dyn Clock>,
        api: SpendApi,
        ceiling: u64,
    ) -> SpendGuard {
        SpendGuard {
            store,
            clock,
            api,
            ceiling,
            plan: LeasePlan::for_ceiling(ceiling),
            lease: tokio::sync::Mutex::new(Lease::default()),
            noticed: std::sync::Mutex::new(None),
            metrics: Metrics::off(),
        }
    }

    /// The guard's metrics to `metrics` (`Koe/Api`: `SpendUsed`, `ModelTokens`,
    /// `ProviderErrors`, dimension `Function`).
    pub fn measured_by(mut self, metrics: Metrics) -> SpendGuard {
        self.metrics = metrics;
        self
    }

    /// How this guard counts (its ceiling's [`LeasePlan`]).
    pub fn plan(&self) -> LeasePlan {
        self.plan
    }

    /// Tokens this guard holds leased and not reserved for a call (counted, not yet spent).
    pub async fn held(&self) -> u64 {
        self.lease
            .lock()
            .await
            .block
            .as_ref()
            .map_or(0, |b| b.tokens)
    }

    fn record(&self) -> Record {
        Record::new(API, self.clock.now()).dimension("Function", self.metrics.function())
    }

    /// The day's count after a reservation, as a share of the ceiling.
    fn measure_spend(&self, total: u64) {
        let used = (total as f64 * 100.0 / self.ceiling as f64).min(100.0);
        self.metrics.emit(&self.record().percent("SpendUsed", used));
    }

    /// A model call that failed (counted whatever it cost).
    pub fn provider_failed(&self) {
        self.metrics.emit(&self.record().count("ProviderErrors", 1));
    }

    /// Reserves `request`'s tokens ([`token_bound`]): `Some` to correct after the call, `None`
    /// when the counter failed (the call goes ahead, its tokens held to count with the next
    /// write that answers: fail-open), the refusal past the ceiling, or 503 for a throttled
    /// counter. From the guard's block when it holds enough, else with one lease: each shard
    /// not known full, in an order of its own, is read, then leased from if it has room.
    pub async fn reserve(&self, request: &ModelRequest) -> Result<Option<Reserved>, ProviderError> {
        let now = self.clock.now();
        let day = UsageDay::of(now);
        let bound = token_bound(request);
        let prompt = prompt_tokens(request);
        let mut lease = self.lease.lock().await;
        // The day turned: what is left of the last day's block goes back to its count.
        if let Some(old) = lease.block.take_if(|b| b.day != day) {
            self.correct(Self::give_back(old)).await;
        }
        lease.owed.take_if(|(d, _)| *d != day);
        if let Some(block) = lease.block.as_mut().filter(|b| b.tokens >= bound) {
            block.tokens -= bound;
            return Ok(Some(Reserved {
                day,
                bound,
                prompt,
                own: None,
            }));
        }
        let have = lease.block.as_ref().map_or(0, |b| b.tokens);
        let owed = lease.owed.as_ref().map_or(0, |(_, t)| *t);
        let api = self.api.as_str();
        let first = fastrand::u32(..self.plan.shards);
        for k in 0..self.plan.shards {
            let shard = (first + k) % self.plan.shards;
            if lease.full(shard, &day, now) {
                continue;
            }
            let counter = shard_counter(api, shard);
            let total = match self.store.read_tokens(&counter, &day.key).await {
                Ok(total) => total,
                Err(e) => return self.unanswered(&mut lease, &day, bound, e),
            };
            let mut want = self.plan.lease(bound, total);
            while let Some(asked) = want {
                // What the block still holds goes with the lease, what was let through
                // uncounted is added to it.
                let amount = (asked.tokens() + owed).saturating_sub(have);
                let limit = asked.limit(self.plan.share);
                match self
                    .store
                    .reserve_tokens(&counter, &day.key, amount, limit, day.expire_at())
                    .await
                {
                    Ok(SpendOutcome::Reserved { total }) => {
                        self.measure_spend(total.saturating_mul(u64::from(self.plan.shards)));
                        lease.owed = None;
                        let own = match asked {
                            Want::Block(tokens) => {
                                lease.block = Some(Block {
                                    day: day.clone(),
                                    shard,
                                    tokens: tokens - bound,
                                    leased_at: now,
                                });
                                None
                            }
                            Want::Own(_) => {
                                lease.block = None;
                                Some(shard)
                            }
                        };
                        return Ok(Some(Reserved {
                            day,
                            bound,
                            prompt,
                            own,
                        }));
                    }
                    // Filled since it was read: a block that no longer fits asks for the
                    // call's own tokens once.
                    Ok(SpendOutcome::CeilingReached) => {
                        want = matches!(asked, Want::Block(_)).then_some(Want::Own(bound));
                    }
                    Err(e) => return self.unanswered(&mut lease, &day, bound, e),
                }
            }
            lease.found_full(shard, &day, now);
        }
        drop(lease);
        self.measure_spend(self.ceiling);
        Err(self.refuse(&day).await)
    }

    /// A read or lease the counter did not answer: throttled, the call is refused (503 with
    /// `Retry-After`: nothing was counted, and a throttled counter must not let calls through
    /// uncounted); otherwise (an outage) it goes ahead, its tokens held to be added to the next
    /// write to the day's count that answers.
    fn unanswered(
        &self,
        lease: &mut Lease,
        day: &UsageDay,
        bound: u64,
        e: StoreError,
    ) -> Result<Option<Reserved>, ProviderError> {
        let api = self.api.as_str();
        if e.throttled {
            tracing::warn!(api, error = %e, "spend counter throttled: model call refused (503)");
            return Err(ProviderError::CounterBusy {
                retry_after_secs: COUNTER_BUSY_RETRY_SECS,
            });
        }
        tracing::warn!(
            api,
            error = %e,
            "spend counter failed: model call allowed, counted with the next write (fail-open)"
        );
        let owed = lease.owed.get_or_insert_with(|| (day.clone(), 0));
        owed.1 += bound;
        Ok(None)
    }

    /// Corrects a reservation to the `used` tokens: a call that leased its own tokens on its
    /// counter at once; one from the block, what it did not use back to the block, what it
    /// used beyond it from the block or else added to the count. A block expired by now goes
    /// back to its count.
    pub async fn settle(&self, reserved: &Reserved, used: u64) {
        let Reserved {
            day, bound, own, ..
        } = reserved;
        self.metrics.emit(&self.record().count("ModelTokens", used));
        let now = self.clock.now();
        let mut corrections = Vec::new();
        let delta = i64::try_from(used).unwrap_or(i64::MAX) - *bound as i64;
        {
            let mut lease = self.lease.lock().await;
            let block = lease.block.as_mut().filter(|b| b.day == *day);
            match (own, block) {
                (_, _) if used == *bound => {}
                (Some(shard), _) => corrections.push(Correction {
                    day: day.clone(),
                    shard: *shard,
                    delta,
                }),
                (None, Some(block)) if used < *bound => block.tokens += bound - used,
                (None, Some(block)) => {
                    let over = used - bound;
                    let taken = over.min(block.tokens);
                    block.tokens -= taken;
                    if over > taken {
                        corrections.push(Correction {
                            day: day.clone(),
                            shard: block.shard,
                            delta: (over - taken) as i64,
                        });
                    }
                }
                // The block went back (expired, the day turned): straight to the count.
                (None, None) => corrections.push(Correction {
                    day: day.clone(),
                    shard: 0,
                    delta,
                }),
            }
            if let Some(old) = lease.block.take_if(|b| b.expired(now)) {
                corrections.extend(Self::give_back(old));
            }
            // A shard this guard gives back to may have room again.
            for c in corrections.iter().filter(|c| c.delta < 0) {
                lease.has_room(c.shard);
            }
        }
        for correction in corrections {
            self.correct(Some(correction)).await;
        }
    }

    /// Returns what is left of the guard's block to its count now (e.g. before a container
    /// stops taking calls).
    pub async fn give_back_lease(&self) {
        let old = self.lease.lock().await.block.take();
        if let Some(old) = old {
            self.correct(Self::give_back(old)).await;
        }
    }

    fn give_back(block: Block) -> Option<Correction> {
        (block.tokens > 0).then(|| Correction {
            delta: -i64::try_from(block.tokens).unwrap_or(i64::MAX),
            day: block.day,
            shard: block.shard,
        })
    }

    async fn correct(&self, correction: Option<Correction>) {
        let Some(Correction { day, shard, delta }) = correction else {
            return;
        };
        let api = self.api.as_str();
        let counter = shard_counter(api, shard);
        if let Err(e) = self
            .store
            .settle_tokens(&counter, &day.key, delta, day.expire_at())
            .await
        {
            tracing::warn!(api, error = %e, "spend counter not corrected to the usage");
            // What it would have added is held to count with the next lease (a correction
            // that gives back is lost: the count errs high).
            if delta > 0 {
                let mut lease = self.lease.lock().await;
                let owed = lease.owed.get_or_insert_with(|| (day.clone(), 0));
                if owed.0 == day {
                    owed.1 += delta as u64;
                }
            }
        }
    }

    /// The refusal once the day's count reached the ceiling: the first of the day notifies. A
    /// guard asks for the notice once a day.
    async fn refuse(&self, day: &UsageDay) -> ProviderError {
        let api = self.api.as_str();
        let seen = self.noticed.lock().unwrap().as_ref() == Some(&day.key);
        let notify = if seen {
            false
        } else {
            // Read first: past the ceiling every guard comes here once, and only the first
            // claims (a write).
            let claimed = match self.store.ceiling_noticed(api, &day.key).await {
                Ok(true) => Ok(false),
                Ok(false) => {
                    self.store
                        .claim_ceiling_notice(api, &day.key, day.expire_at())
                        .await
                }
                Err(e) => Err(e),
            };
            match claimed {
                Ok(first) => {
                    *self.noticed.lock().unwrap() = Some(day.key.clone());
                    first
                }
                // Better a second notice than none.
                Err(e) => {
                    tracing::warn!(api, error = %e, "spend ceiling notice could not be claimed");
                    true
                }
            }
        };
        if notify {
            tracing::error!(
                api,
                ceiling = self.ceiling,
                day = %day.key,
                "daily model token ceiling reached: completions refused until 00:00 JST"
            );
        }
        ProviderError::CeilingReached {
            notify,
            retry_after_secs: day.retry_after_secs(self.clock.now()),
        }
    }
}

/// A `ModelProvider` that counts every completion against its API's daily ceiling. A call whose
/// future is dropped (its client gone) keeps its reservation: the provider may still complete,
/// and bill, the whole completion.
pub struct GuardedModel {
    inner: Arc<dyn ModelProvider>,
    guard: SpendGuard,
}

impl GuardedModel {
    pub fn wrap(inner: Arc<dyn ModelProvider>, guard: SpendGuard) -> Arc<dyn ModelProvider> {
        Arc::new(GuardedModel { inner, guard })
    }
}

#[async_trait]
impl ModelProvider for GuardedModel {
    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, ProviderError> {
        let reserved = self.guard.reserve(&request).await?;
        let result = self.inner.complete(request).await;
        if result.is_err() {
            self.guard.provider_failed();
        }
        if let Some(reserved) = &reserved {
            let used = match &result {
                // A provider that reports no usage keeps the reservation.
                Ok(reply) if reply.usage.total_tokens > 0 => reply.usage.total_tokens,
                Ok(_) => reserved.bound,
                // It may have run (and billed) the completion: keep the reservation.
                Err(ProviderError::Timeout | ProviderError::BadResponse(_)) => reserved.bound,
                // Refused or unreachable: nothing was used.
                Err(_) => 0,
            };
            self.guard.settle(reserved, used).await;
        }
        result
    }
}
