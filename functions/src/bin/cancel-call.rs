//! Lambda for DELETE /calls: `koe::routes::CancelCall` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::lambda::http::Error> {
    koe::lambda::http::run::<koe::routes::CancelCall>().await
}
