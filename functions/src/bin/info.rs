//! Lambda for GET /api/info: `koe::endpoints::Info` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run::<koe::endpoints::Info>().await
}
