//! [`store_layer!`](crate::store_layer): a test's layer in front of a `dyn Store`, written as its
//! hook alone.

/// Implements [`koe::store::StoreLayer`] for `$layer`, a layer in front of the `Arc<dyn Store>`
/// in its field `inner`, with the hook `|this, op, call| { ... }`: `this` the layer, `op` the
/// request ([`koe::store::Op`]), `call` the inner store's answer ([`koe::store::Call`]); in the
/// body, `T` and `E` are the answer's types (`E: From<StoreError>`).
#[macro_export]
macro_rules! store_layer {
    ($layer:ty, |$this:ident, $op:pat_param, $call:pat_param| $around:block) => {
        #[$crate::async_trait::async_trait]
        impl ::koe::store::StoreLayer for $layer {
            type Inner = dyn ::koe::store::Store;

            fn inner(&self) -> &Self::Inner {
                &*self.inner
            }

            async fn around<T, E>(
                &self,
                $op: ::koe::store::Op<'_>,
                $call: ::koe::store::Call<'_, T, E>,
            ) -> Result<T, E>
            where
                T: Send,
                E: From<::koe::store::StoreError> + Send,
            {
                let $this = self;
                $around
            }
        }
    };
}
