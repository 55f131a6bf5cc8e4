//! Lambda for POST /calls: `koe::endpoints::CreateCall` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run::<koe::endpoints::CreateCall>().await
}
