//! Lambda for POST /agent: `koe::agent::api::Agent` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::app::lambda::http::Error> {
    koe::app::lambda::http::run::<koe::agent::api::Agent>().await
}
