//! Lambda for POST /calls: `koe::routes::CreateCall` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::lambda::http::Error> {
    koe::lambda::http::run::<koe::routes::CreateCall>().await
}
