//! Lambda for PUT /devices: `koe::routes::PutDevice` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::lambda::http::Error> {
    koe::lambda::http::run::<koe::routes::PutDevice>().await
}
