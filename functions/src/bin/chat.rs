//! Lambda for POST /api/chat: `koe::endpoints::Chat` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run::<koe::endpoints::Chat>().await
}
