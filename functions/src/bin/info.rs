//! Lambda for GET /api/info: `koe::chat::api::Info` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::app::lambda::http::Error> {
    koe::app::lambda::http::run::<koe::chat::api::Info>().await
}
