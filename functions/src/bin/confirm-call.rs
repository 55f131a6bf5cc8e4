//! Lambda for POST /calls/confirm: `koe::routes::ConfirmCall` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::lambda::http::Error> {
    koe::lambda::http::run::<koe::routes::ConfirmCall>().await
}
