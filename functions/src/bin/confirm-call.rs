//! Lambda for POST /calls/confirm: `koe::endpoints::ConfirmCall` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run::<koe::endpoints::ConfirmCall>().await
}
