//! Lambda for POST /agent: `koe::routes::Agent` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::lambda::http::Error> {
    koe::lambda::http::run::<koe::routes::Agent>().await
}
