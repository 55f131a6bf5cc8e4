//! Lambda for PUT /devices: `koe::devices::api::PutDevice` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::app::lambda::http::Error> {
    koe::app::lambda::http::run::<koe::devices::api::PutDevice>().await
}
