//! The spend guard: a ceiling of model tokens per Japan day for each public API, around the
//! `ModelProvider` port.
//!
//! Before a completion goes out, its tokens (the prompt's estimate and the whole `max_tokens`)
//! are reserved against the day's count with one conditional `ADD` (only while the count is
//! below the ceiling), so concurrent calls can never together pass the ceiling by more than one
//! call; under a large ceiling from a block the guard leased that way ([`lease`]); after it, the count is corrected to the usage the provider reported, and a streamed
//! reply cut short (an error, a client gone) to what it is known to have cost: its prompt and
//! the pieces it received (docs/spend-guard.md). Once the count has reached the ceiling every completion
//! is refused (503 `SPEND_CEILING_REACHED`, no model call) until 00:00 Japan time, and the
//! first refusal of the day, one atomic claim in the store, is the one that notifies the team.
//! If the store fails, the call goes ahead uncounted with a warning (fail-open, as the agent's
//! daily limit): an outage of the counter must not take chat down, and the function's reserved
//! concurrency still bounds the rate.

use std::sync::Arc;

pub mod lease;
mod stream;
pub use lease::LeasePlan;
use lease::{Block, Lease, REFUSAL_HOLD_SECS, shard_counter};
pub use stream::{GuardedStream, Held};

use async_trait::async_trait;

use crate::domain::usage_day::UsageDay;
use crate::model::{ModelProvider, ModelReply, ModelRequest, ProviderError};
use crate::platform::clock::Clock;
use crate::platform::metrics::catalogue::API;
use crate::platform::metrics::{Metrics, Record};
use crate::store::SpendOutcome;
use crate::store::UsageStore;

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
/// container: under a large ceiling it leases blocks of tokens ([`lease`]).
pub struct SpendGuard {
    store: Arc<dyn UsageStore>,
    clock: Arc<dyn Clock>,
    api: SpendApi,
    ceiling: u64,
    plan: LeasePlan,
    /// Held across a lease's write, so that a container's concurrent calls lease one block.
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
    /// when the counter failed (the call goes ahead uncounted, fail-open), the refusal past the
    /// ceiling. From the guard's block when it holds enough, else with one lease.
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
        if lease.refuses(&day, now) {
            drop(lease);
            return Err(self.refuse(&day).await);
        }
        let have = lease.block.as_ref().map_or(0, |b| b.tokens);
        if let Some(block) = lease.block.as_mut().filter(|b| b.tokens >= bound) {
            block.tokens -= bound;
            return Ok(Some(Reserved { day, bound, prompt }));
        }
        // Every shard until one grants; once all refused today, one at random (they fill
        // again only by what guards return), so that a refusal costs one write.
        let swept = lease.refused.as_ref().is_some_and(|(d, _)| *d == day.key);
        let tries = if swept { 1 } else { self.plan.shards };
        // Under a small ceiling no block is kept: the lock is not held across the write, so
        // that a process's calls reserve side by side (koe-local).
        let lease = if self.plan.leasing() {
            Some(lease)
        } else {
            drop(lease);
            None
        };
        let want = bound * self.plan.calls_per_lease - have;
        let shard_ceiling = self.plan.shard_ceiling(self.ceiling);
        let first = fastrand::u32(..self.plan.shards);
        for k in 0..tries {
            let shard = (first + k) % self.plan.shards;
            let counter = shard_counter(self.api.as_str(), shard);
            match self
                .store
                .reserve_tokens(&counter, &day.key, want, shard_ceiling, day.expire_at())
                .await
            {
                Ok(SpendOutcome::Reserved { total }) => {
                    self.measure_spend(total.saturating_mul(u64::from(self.plan.shards)));
                    if let Some(mut lease) = lease {
                        lease.block = Some(Block {
                            day: day.clone(),
                            shard,
                            tokens: have + want - bound,
                            leased_at: now,
                        });
                    }
                    return Ok(Some(Reserved { day, bound, prompt }));
                }
                Ok(SpendOutcome::CeilingReached) => continue,
                Err(e) => {
                    tracing::warn!(
                        api = self.api.as_str(),
                        error = %e,
                        "spend counter failed: model call allowed uncounted (fail-open)"
                    );
                    return Ok(None);
                }
            }
        }
        self.measure_spend(self.ceiling);
        if let Some(mut lease) = lease {
            // Jittered, so that guards refused together do not ask again together.
            let hold = REFUSAL_HOLD_SECS * 1000;
            let until = now + chrono::Duration::milliseconds(hold + fastrand::i64(0..hold / 2));
            lease.refused = Some((day.key.clone(), until));
        }
        Err(self.refuse(&day).await)
    }

    /// Corrects a reservation to the `used` tokens: what it did not use back to the guard's
    /// block (returned to the count at once under a small ceiling, else when the block
    /// expires), what it used beyond it from the block or else added to the count.
    pub async fn settle(&self, reserved: &Reserved, used: u64) {
        let Reserved { day, bound, .. } = reserved;
        self.metrics.emit(&self.record().count("ModelTokens", used));
        if used == *bound {
            return;
        }
        let now = self.clock.now();
        let mut corrections = Vec::new();
        {
            let mut lease = self.lease.lock().await;
            let block = lease.block.as_mut().filter(|b| b.day == *day);
            match block {
                Some(block) if used < *bound => block.tokens += bound - used,
                Some(block) => {
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
                None => corrections.push(Correction {
                    day: day.clone(),
                    shard: 0,
                    delta: used as i64 - *bound as i64,
                }),
            }
            if let Some(old) = lease
                .block
                .take_if(|b| !self.plan.leasing() || b.expired(now))
            {
                corrections.extend(Self::give_back(old));
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
            match self
                .store
                .claim_ceiling_notice(api, &day.key, day.expire_at())
                .await
            {
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
