//! Lambda for GET /calls: `koe::routes::GetCall` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::lambda::http::Error> {
    koe::lambda::http::run::<koe::routes::GetCall>().await
}
