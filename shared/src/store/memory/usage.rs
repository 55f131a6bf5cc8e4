//! The embedded store's usage counters (the agent's daily use, plans' answers, the APIs' daily
//! token counts) and kept idempotent answers.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::MemoryStore;
use crate::store::{IdempotencyStore, IdempotentAnswer, StoreError, UsageRequest, UsageStore};

#[async_trait]
impl UsageStore for MemoryStore {
    async fn add_to_counter(&self, request: UsageRequest<'_>) -> Result<Option<i64>, StoreError> {
        let mut tables = self.lock();
        if request.reads() {
            return Ok(Some(
                tables.counters.get(&request.counter()).map_or(0, |c| c.0),
            ));
        }
        let counter = tables.counters.entry(request.counter()).or_insert((0, 0));
        if request
            .limit()
            .is_some_and(|limit| i128::from(counter.0) >= i128::from(limit))
        {
            return Ok(None);
        }
        *counter = (counter.0 + request.amount(), request.expire_at());
        Ok(Some(counter.0))
    }
}

#[async_trait]
impl IdempotencyStore for MemoryStore {
    async fn idempotent_answer(
        &self,
        key: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<IdempotentAnswer>, StoreError> {
        Ok(self
            .lock()
            .idempotent_answers
            .get(key)
            .filter(|a| a.expire_at > now.timestamp())
            .cloned())
    }

    async fn keep_idempotent_answer(
        &self,
        answer: &IdempotentAnswer,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut tables = self.lock();
        if tables
            .idempotent_answers
            .get(&answer.key)
            .is_some_and(|a| a.expire_at > now.timestamp())
        {
            return Ok(false);
        }
        tables
            .idempotent_answers
            .insert(answer.key.clone(), answer.clone());
        Ok(true)
    }
}
