//! Macros that implement a store port for a wrapper by handing every request to its inner store
//! unchanged, so that a fault or cost layer writes out only the ports it changes.

/// `forward_usage_store!(Wrapper, inner)`: [`UsageStore`](crate::store::UsageStore) for
/// `Wrapper` by its field `inner` (any `Deref` to a `UsageStore`, e.g. `Arc<dyn Store>`).
#[macro_export]
macro_rules! forward_usage_store {
    ($ty:ty, $inner:ident) => {
        #[$crate::store::forwarded_async_trait]
        impl $crate::store::UsageStore for $ty {
            async fn count_agent_use(
                &self,
                id: &$crate::domain::device::DeviceId,
                day: &str,
                limit: u32,
                expire_at: i64,
            ) -> Result<$crate::store::UsageOutcome, $crate::store::StoreError> {
                $crate::store::UsageStore::count_agent_use(&*self.$inner, id, day, limit, expire_at)
                    .await
            }

            async fn count_plan_answer(
                &self,
                plan_id: &str,
                limit: u32,
                expire_at: i64,
            ) -> Result<$crate::store::UsageOutcome, $crate::store::StoreError> {
                $crate::store::UsageStore::count_plan_answer(
                    &*self.$inner,
                    plan_id,
                    limit,
                    expire_at,
                )
                .await
            }

            async fn reserve_tokens(
                &self,
                api: &str,
                day: &str,
                tokens: u64,
                ceiling: u64,
                expire_at: i64,
            ) -> Result<$crate::store::SpendOutcome, $crate::store::StoreError> {
                $crate::store::UsageStore::reserve_tokens(
                    &*self.$inner,
                    api,
                    day,
                    tokens,
                    ceiling,
                    expire_at,
                )
                .await
            }

            async fn settle_tokens(
                &self,
                api: &str,
                day: &str,
                delta: i64,
                expire_at: i64,
            ) -> Result<(), $crate::store::StoreError> {
                $crate::store::UsageStore::settle_tokens(&*self.$inner, api, day, delta, expire_at)
                    .await
            }

            async fn claim_ceiling_notice(
                &self,
                api: &str,
                day: &str,
                expire_at: i64,
            ) -> Result<bool, $crate::store::StoreError> {
                $crate::store::UsageStore::claim_ceiling_notice(&*self.$inner, api, day, expire_at)
                    .await
            }
        }
    };
}

/// `forward_idempotency_store!(Wrapper, inner)`:
/// [`IdempotencyStore`](crate::store::IdempotencyStore) for `Wrapper` by its field `inner`.
#[macro_export]
macro_rules! forward_idempotency_store {
    ($ty:ty, $inner:ident) => {
        #[$crate::store::forwarded_async_trait]
        impl $crate::store::IdempotencyStore for $ty {
            async fn idempotent_answer(
                &self,
                key: &str,
                now: $crate::store::ForwardedTime,
            ) -> Result<Option<$crate::store::IdempotentAnswer>, $crate::store::StoreError> {
                $crate::store::IdempotencyStore::idempotent_answer(&*self.$inner, key, now).await
            }

            async fn keep_idempotent_answer(
                &self,
                answer: &$crate::store::IdempotentAnswer,
                now: $crate::store::ForwardedTime,
            ) -> Result<bool, $crate::store::StoreError> {
                $crate::store::IdempotencyStore::keep_idempotent_answer(&*self.$inner, answer, now)
                    .await
            }
        }
    };
}
