//! Lambda for POST /calls/confirm: `koe::calls::api::ConfirmCall` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::app::lambda::http::Error> {
    koe::app::lambda::http::run::<koe::calls::api::ConfirmCall>().await
}
