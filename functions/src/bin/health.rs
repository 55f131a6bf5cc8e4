//! Lambda for GET /health: `koe::routes::Health` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::lambda::http::Error> {
    koe::lambda::http::run::<koe::routes::Health>().await
}
