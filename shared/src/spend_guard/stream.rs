//! The spend guard around the streaming port (`chat-stream`): the same reservation before the
//! provider is asked, corrected to the usage the stream reports last.

use std::sync::Arc;

use async_trait::async_trait;

use super::{Reserved, SpendGuard};
use crate::model::{ModelRequest, ProviderError, ReplyChunk, ReplyStream, StreamingModel};

/// A `StreamingModel` that counts every streamed reply against its API's daily ceiling.
pub struct GuardedStream {
    inner: Arc<dyn StreamingModel>,
    guard: Arc<SpendGuard>,
}

impl GuardedStream {
    pub fn wrap(inner: Arc<dyn StreamingModel>, guard: SpendGuard) -> Arc<dyn StreamingModel> {
        Arc::new(GuardedStream {
            inner,
            guard: Arc::new(guard),
        })
    }
}

#[async_trait]
impl StreamingModel for GuardedStream {
    async fn stream(&self, request: ModelRequest) -> Result<Box<dyn ReplyStream>, ProviderError> {
        let reserved = self.guard.reserve(&request).await?;
        match self.inner.stream(request).await {
            // Refused or unreachable before the first byte: nothing was used.
            Err(e) => {
                if let Some(reserved) = &reserved {
                    self.guard.settle(reserved, 0).await;
                }
                Err(e)
            }
            Ok(stream) => Ok(Box::new(Counted {
                inner: stream,
                guard: self.guard.clone(),
                reserved,
            })),
        }
    }
}

/// The provider's stream, correcting the reservation when its usage arrives (a stream that
/// ends without one keeps the reservation: it may have been billed).
struct Counted {
    inner: Box<dyn ReplyStream>,
    guard: Arc<SpendGuard>,
    /// The reservation still to correct.
    reserved: Option<Reserved>,
}

#[async_trait]
impl ReplyStream for Counted {
    async fn next(&mut self) -> Option<Result<ReplyChunk, ProviderError>> {
        let chunk = self.inner.next().await;
        if let Some(Ok(ReplyChunk::Usage(usage))) = &chunk
            && usage.total_tokens > 0
            && let Some(reserved) = self.reserved.take()
        {
            self.guard.settle(&reserved, usage.total_tokens).await;
        }
        chunk
    }
}
