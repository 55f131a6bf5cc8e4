//! The spend guard around the streaming port (`chat-stream`): the same reservation before the
//! provider is asked, corrected to the usage the stream reports last.

use std::sync::Arc;

use async_trait::async_trait;

use super::{GuardedModel, SpendApi, token_bound};
use crate::agent::daily_limit::UsageDay;
use crate::clock::Clock;
use crate::model::{
    ModelProvider, ModelRequest, ProviderError, ReplyChunk, ReplyStream, StreamingModel,
};
use crate::store::{SpendOutcome, Store};

/// A `StreamingModel` that counts every streamed reply against its API's daily ceiling.
pub struct GuardedStream {
    inner: Arc<dyn StreamingModel>,
    /// The refusal and its one notice are the completion guard's (same API, same counter).
    refusals: GuardedModel,
}

impl GuardedStream {
    pub fn wrap(
        inner: Arc<dyn StreamingModel>,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        api: SpendApi,
        ceiling: u64,
    ) -> Arc<dyn StreamingModel> {
        // (The completion guard's own model is never called from here.)
        let unused: Arc<dyn ModelProvider> = Arc::new(Unused);
        Arc::new(GuardedStream {
            inner,
            refusals: GuardedModel {
                inner: unused,
                store,
                clock,
                api,
                ceiling,
            },
        })
    }
}

struct Unused;

#[async_trait]
impl ModelProvider for Unused {
    async fn complete(&self, _: ModelRequest) -> Result<crate::model::ModelReply, ProviderError> {
        Err(ProviderError::NotConfigured)
    }
}

#[async_trait]
impl StreamingModel for GuardedStream {
    async fn stream(&self, request: ModelRequest) -> Result<Box<dyn ReplyStream>, ProviderError> {
        let g = &self.refusals;
        let api = g.api.as_str();
        let day = UsageDay::of(g.clock.now());
        let bound = token_bound(&request);
        let reserved = match g
            .store
            .reserve_tokens(api, &day.key, bound, g.ceiling, day.expire_at())
            .await
        {
            Ok(SpendOutcome::Reserved { .. }) => true,
            Ok(SpendOutcome::CeilingReached) => return Err(g.refuse(&day).await),
            Err(e) => {
                tracing::warn!(api, error = %e, "spend counter failed: stream allowed uncounted");
                false
            }
        };
        let inner = self.inner.stream(request).await;
        match inner {
            // Refused or unreachable before the first byte: nothing was used.
            Err(e) => {
                if reserved {
                    settle(g, &day, -(bound as i64)).await;
                }
                Err(e)
            }
            Ok(stream) => Ok(Box::new(Counted {
                inner: stream,
                store: g.store.clone(),
                api: g.api,
                day,
                bound: reserved.then_some(bound),
            })),
        }
    }
}

async fn settle(g: &GuardedModel, day: &UsageDay, delta: i64) {
    let api = g.api.as_str();
    if delta != 0
        && let Err(e) = g
            .store
            .settle_tokens(api, &day.key, delta, day.expire_at())
            .await
    {
        tracing::warn!(api, error = %e, "spend counter not corrected to the usage");
    }
}

/// The provider's stream, correcting the reservation when its usage arrives (a stream that
/// ends without one keeps the reservation: it may have been billed).
struct Counted {
    inner: Box<dyn ReplyStream>,
    store: Arc<dyn Store>,
    api: SpendApi,
    day: UsageDay,
    /// The reservation still to correct.
    bound: Option<u64>,
}

#[async_trait]
impl ReplyStream for Counted {
    async fn next(&mut self) -> Option<Result<ReplyChunk, ProviderError>> {
        let chunk = self.inner.next().await;
        if let Some(Ok(ReplyChunk::Usage(usage))) = &chunk
            && usage.total_tokens > 0
            && let Some(bound) = self.bound.take()
        {
            let delta = usage.total_tokens as i64 - bound as i64;
            let api = self.api.as_str();
            if delta != 0
                && let Err(e) = self
                    .store
                    .settle_tokens(api, &self.day.key, delta, self.day.expire_at())
                    .await
            {
                tracing::warn!(api, error = %e, "spend counter not corrected to the usage");
            }
        }
        chunk
    }
}
