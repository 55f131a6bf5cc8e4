//! The embedded store's usage counters (the agent's daily use, plans' answers, the APIs' daily
//! token counts) and kept idempotent answers.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::MemoryStore;
use crate::domain::device::DeviceId;
use crate::store::{
    IdempotencyStore, IdempotentAnswer, SpendOutcome, StoreError, UsageOutcome, UsageStore,
};

#[async_trait]
impl UsageStore for MemoryStore {
    async fn count_agent_use(
        &self,
        id: &DeviceId,
        day: &str,
        limit: u32,
        expire_at: i64,
    ) -> Result<UsageOutcome, StoreError> {
        let mut tables = self.lock();
        let entry = tables.usage.entry((id.clone(), day.to_owned()));
        Ok(count_below(
            entry.or_insert((0, expire_at)),
            limit,
            expire_at,
        ))
    }

    async fn count_plan_answer(
        &self,
        plan_id: &str,
        limit: u32,
        expire_at: i64,
    ) -> Result<UsageOutcome, StoreError> {
        let mut tables = self.lock();
        let entry = tables.plan_answers.entry(plan_id.to_owned());
        Ok(count_below(
            entry.or_insert((0, expire_at)),
            limit,
            expire_at,
        ))
    }

    async fn reserve_tokens(
        &self,
        api: &str,
        day: &str,
        tokens: u64,
        ceiling: u64,
        _expire_at: i64,
    ) -> Result<SpendOutcome, StoreError> {
        let mut tables = self.lock();
        let total = tables
            .spend
            .entry((api.to_owned(), day.to_owned()))
            .or_insert(0);
        if i128::from(*total) >= i128::from(ceiling) {
            return Ok(SpendOutcome::CeilingReached);
        }
        *total += tokens as i64;
        Ok(SpendOutcome::Reserved {
            total: (*total).max(0) as u64,
        })
    }

    async fn settle_tokens(
        &self,
        api: &str,
        day: &str,
        delta: i64,
        _expire_at: i64,
    ) -> Result<(), StoreError> {
        *self
            .lock()
            .spend
            .entry((api.to_owned(), day.to_owned()))
            .or_insert(0) += delta;
        Ok(())
    }

    async fn claim_ceiling_notice(
        &self,
        api: &str,
        day: &str,
        _expire_at: i64,
    ) -> Result<bool, StoreError> {
        Ok(self.lock().notices.insert((api.to_owned(), day.to_owned())))
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

/// One more on a (count, expireAt) counter unless it already reached `limit`.
fn count_below(counter: &mut (u32, i64), limit: u32, expire_at: i64) -> UsageOutcome {
    if counter.0 >= limit {
        return UsageOutcome::LimitReached;
    }
    *counter = (counter.0 + 1, expire_at);
    UsageOutcome::Counted { count: counter.0 }
}
