//! Lambda for GET /api/info: `koe::routes::Info` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::lambda::http::Error> {
    koe::lambda::http::run::<koe::routes::Info>().await
}
