//! Lambda for the `Agent` endpoint (see the route table in `koe::routes`).

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run(koe::Endpoint::Agent).await
}
