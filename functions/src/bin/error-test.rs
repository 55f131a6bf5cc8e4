//! Lambda for GET /api/error: `koe::chat::api::ErrorTest` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::app::lambda::http::Error> {
    koe::app::lambda::http::run::<koe::chat::api::ErrorTest>().await
}
