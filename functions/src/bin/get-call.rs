//! Lambda for GET /calls: `koe::calls::api::GetCall` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::app::lambda::http::Error> {
    koe::app::lambda::http::run::<koe::calls::api::GetCall>().await
}
