//! Lambda for GET /api/error: `koe::routes::ErrorTest` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::lambda::http::Error> {
    koe::lambda::http::run::<koe::routes::ErrorTest>().await
}
