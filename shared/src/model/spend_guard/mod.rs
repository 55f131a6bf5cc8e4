//! The spend guard: a ceiling of model tokens per Japan day for each public API, around the
//! `ModelProvider` port.
//!
//! Before a completion goes out, its tokens (the prompt's estimate and the whole `max_tokens`)
//! are reserved against the day's count with one conditional `ADD` (only while the count is
//! below the ceiling), so concurrent calls can never together pass the ceiling by more than one
//! call; after it, the count is corrected to the usage the provider reported, and a streamed
//! reply cut short (an error, a client gone) to what it is known to have cost: its prompt and
//! the pieces it received (docs/spend-guard.md). Once the count has reached the ceiling every completion
//! is refused (503 `SPEND_CEILING_REACHED`, no model call) until 00:00 Japan time, and the
//! first refusal of the day, one atomic claim in the store, is the one that notifies the team.
//! If the store fails, the call goes ahead uncounted with a warning (fail-open, as the agent's
//! daily limit): an outage of the counter must not take chat down, and the function's reserved
//! concurrency still bounds the rate.

use std::sync::Arc;

mod stream;
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
/// the refusal past the ceiling. Shared by the completion and streaming guards.
pub struct SpendGuard {
    store: Arc<dyn UsageStore>,
    clock: Arc<dyn Clock>,
    api: SpendApi,
    ceiling: u64,
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
            metrics: Metrics::off(),
        }
    }

    /// The guard's metrics to `metrics` (`Koe/Api`: `SpendUsed`, `ModelTokens`,
    /// `ProviderErrors`, dimension `Function`).
    pub fn measured_by(mut self, metrics: Metrics) -> SpendGuard {
        self.metrics = metrics;
        self
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
    /// ceiling.
    pub async fn reserve(&self, request: &ModelRequest) -> Result<Option<Reserved>, ProviderError> {
        let api = self.api.as_str();
        let day = UsageDay::of(self.clock.now());
        let bound = token_bound(request);
        let prompt = prompt_tokens(request);
        match self
            .store
            .reserve_tokens(api, &day.key, bound, self.ceiling, day.expire_at())
            .await
        {
            Ok(SpendOutcome::Reserved { total }) => {
                self.measure_spend(total);
                Ok(Some(Reserved { day, bound, prompt }))
            }
            Ok(SpendOutcome::CeilingReached) => {
                self.measure_spend(self.ceiling);
                Err(self.refuse(&day).await)
            }
            Err(e) => {
                tracing::warn!(
                    api,
                    error = %e,
                    "spend counter failed: model call allowed uncounted (fail-open)"
                );
                Ok(None)
            }
        }
    }

    /// Corrects a reservation to the `used` tokens.
    pub async fn settle(&self, reserved: &Reserved, used: u64) {
        let api = self.api.as_str();
        let Reserved { day, bound, .. } = reserved;
        self.metrics.emit(&self.record().count("ModelTokens", used));
        let delta = used as i64 - *bound as i64;
        if delta != 0
            && let Err(e) = self
                .store
                .settle_tokens(api, &day.key, delta, day.expire_at())
                .await
        {
            tracing::warn!(api, error = %e, "spend counter not corrected to the usage");
        }
    }

    /// The refusal once the day's count reached the ceiling: the first of the day notifies.
    async fn refuse(&self, day: &UsageDay) -> ProviderError {
        let api = self.api.as_str();
        let notify = match self
            .store
            .claim_ceiling_notice(api, &day.key, day.expire_at())
            .await
        {
            Ok(first) => first,
            // Better a second notice than none.
            Err(e) => {
                tracing::warn!(api, error = %e, "spend ceiling notice could not be claimed");
                true
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
