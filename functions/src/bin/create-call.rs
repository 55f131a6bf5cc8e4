//! Lambda for POST /calls: `koe::calls::api::CreateCall` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::app::lambda::http::Error> {
    koe::app::lambda::http::run::<koe::calls::api::CreateCall>().await
}
