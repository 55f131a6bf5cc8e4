//! Lambda for DELETE /calls: `koe::endpoints::CancelCall` (links only what its ports use).

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run::<koe::endpoints::CancelCall>().await
}
