//! Lambda for POST /api/chat: `koe::chat::api::Chat` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::app::lambda::http::Error> {
    koe::app::lambda::http::run::<koe::chat::api::Chat>().await
}
