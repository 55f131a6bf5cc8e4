//! The spend guard around the streaming port (`chat-stream`): the same reservation before the
//! provider is asked, settled on every way a stream can end: its usage chunk, its end, an
//! error, or the stream dropped (its client gone).

use std::sync::Arc;

use async_trait::async_trait;

use super::{Reserved, SpendGuard, text_tokens};
use crate::model::{ModelRequest, ProviderError, ReplyChunk, ReplyStream, StreamingModel};

/// A `StreamingModel` that counts every streamed reply against its API's daily ceiling.
pub struct GuardedStream {
    inner: Arc<dyn StreamingModel>,
    guard: Arc<SpendGuard>,
}

impl GuardedStream {
    pub fn wrap(inner: Arc<dyn StreamingModel>, guard: SpendGuard) -> Arc<dyn StreamingModel> {
        Self::wrap_shared(inner, Arc::new(guard))
    }

    /// As [`GuardedStream::wrap`], with a guard the caller keeps too (to see what it holds).
    pub fn wrap_shared(
        inner: Arc<dyn StreamingModel>,
        guard: Arc<SpendGuard>,
    ) -> Arc<dyn StreamingModel> {
        Arc::new(GuardedStream { inner, guard })
    }
}

#[async_trait]
impl StreamingModel for GuardedStream {
    async fn stream(&self, request: ModelRequest) -> Result<Box<dyn ReplyStream>, ProviderError> {
        let held = Held {
            guard: self.guard.clone(),
            reserved: self.guard.reserve(&request).await?,
            received: 0,
        };
        match self.inner.stream(request).await {
            // Refused or unreachable before the first byte: nothing was used.
            Err(e) => {
                self.guard.provider_failed();
                held.settle(0).await;
                Err(e)
            }
            Ok(stream) => Ok(Box::new(Counted {
                inner: stream,
                held: Some(held),
            })),
        }
    }
}

/// A reservation in flight for a streamed reply, with the tokens received so far. Settled by
/// [`Held::settle`]; if it is dropped unsettled (the stream's client went away, its future was
/// dropped), it settles itself in the background to what the reply is known to have cost: its
/// prompt and the pieces received. (In a Lambda, a task still running when the response is
/// done may be frozen with the container and finish at its next invocation; a container that
/// never runs again leaves its reservation counted: too much, never too little.)
pub struct Held {
    guard: Arc<SpendGuard>,
    /// `None`: settled, or never counted (the counter failed: fail-open).
    reserved: Option<Reserved>,
    received: u64,
}

impl Held {
    /// Corrects the reservation to `used` tokens, now.
    pub async fn settle(mut self, used: u64) {
        if let Some(reserved) = self.reserved.take() {
            self.guard.settle(&reserved, used).await;
        }
    }

    /// What the reply has cost so far, as far as is known without its usage.
    fn cost_so_far(&self) -> u64 {
        self.reserved
            .as_ref()
            .map_or(0, |r| r.prompt() + self.received)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(reserved) = self.reserved.take() else {
            return;
        };
        let used = reserved.prompt() + self.received;
        let guard = self.guard.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { guard.settle(&reserved, used).await });
            }
            Err(_) => tracing::warn!("spend reservation dropped outside a runtime: not settled"),
        }
    }
}

/// The provider's stream, settling its reservation when the usage arrives, when it ends or
/// fails without one (its prompt and the pieces received), or when it is dropped.
struct Counted {
    inner: Box<dyn ReplyStream>,
    /// The reservation still to settle.
    held: Option<Held>,
}

#[async_trait]
impl ReplyStream for Counted {
    async fn next(&mut self) -> Option<Result<ReplyChunk, ProviderError>> {
        let chunk = self.inner.next().await;
        if let (Some(Err(_)), Some(held)) = (&chunk, &self.held) {
            held.guard.provider_failed();
        }
        let settle_to = match (&chunk, self.held.as_mut()) {
            (_, None) => None,
            (Some(Ok(ReplyChunk::Usage(usage))), Some(_)) if usage.total_tokens > 0 => {
                Some(usage.total_tokens)
            }
            (Some(Ok(ReplyChunk::Text(text))), Some(held)) => {
                held.received += text_tokens(text).max(1);
                None
            }
            (Some(Ok(ReplyChunk::Usage(_))), Some(_)) => None,
            // Ended or failed without its usage: what it is known to have cost.
            (None | Some(Err(_)), Some(held)) => Some(held.cost_so_far()),
        };
        if let Some(used) = settle_to
            && let Some(held) = self.held.take()
        {
            held.settle(used).await;
        }
        chunk
    }
}
