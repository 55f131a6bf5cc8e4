//! Lambda for DELETE /calls: `koe::calls::api::CancelCall` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::app::lambda::http::Error> {
    koe::app::lambda::http::run::<koe::calls::api::CancelCall>().await
}
