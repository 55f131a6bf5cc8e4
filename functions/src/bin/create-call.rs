//! Lambda for the `CreateCall` endpoint (see the route table in `koe::routes`).

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run(koe::Endpoint::CreateCall).await
}
