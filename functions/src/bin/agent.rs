//! Lambda for POST /agent: `koe::endpoints::Agent` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run::<koe::endpoints::Agent>().await
}
