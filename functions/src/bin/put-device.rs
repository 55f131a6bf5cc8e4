//! Lambda for PUT /devices: `koe::endpoints::PutDevice` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run::<koe::endpoints::PutDevice>().await
}
