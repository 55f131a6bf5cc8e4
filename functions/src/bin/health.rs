//! Lambda for GET /health: `koe::chat::api::Health` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::app::lambda::http::Error> {
    koe::app::lambda::http::run::<koe::chat::api::Health>().await
}
