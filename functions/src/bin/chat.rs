//! Lambda for POST /api/chat: `koe::routes::Chat` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::lambda::http::Error> {
    koe::lambda::http::run::<koe::routes::Chat>().await
}
