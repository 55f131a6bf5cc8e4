//! The store as an endpoint sees it: every request within what is left of the invocation's
//! deadline (`crate::platform::deadline`), so a slow store costs a 503 while there is time to answer,
//! never a function killed mid-way. Outside a deadline's scope (the dispatcher) it changes
//! nothing.

use std::sync::Arc;

use async_trait::async_trait;

use super::{Call, Op, Store, StoreError, StoreLayer};
use crate::platform::deadline;

/// `inner`, each request cut at the deadline.
pub struct Deadlined(pub Arc<dyn Store>);

#[async_trait]
impl StoreLayer for Deadlined {
    type Inner = dyn Store;

    fn inner(&self) -> &Self::Inner {
        self.0.as_ref()
    }

    async fn around<T, E>(&self, op: Op<'_>, call: Call<'_, T, E>) -> Result<T, E>
    where
        T: Send,
        E: From<StoreError> + Send,
    {
        match deadline::within(call()).await {
            Ok(answer) => answer,
            Err(expired) => Err(StoreError::new(format!(
                "{} not answered: {expired}",
                op.request().as_str()
            ))
            .into()),
        }
    }
}
