//! Lambda for GET /api/error: `koe::endpoints::ErrorTest` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run::<koe::endpoints::ErrorTest>().await
}
