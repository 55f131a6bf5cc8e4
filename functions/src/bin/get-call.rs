//! Lambda for GET /calls: `koe::endpoints::GetCall` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run::<koe::endpoints::GetCall>().await
}
