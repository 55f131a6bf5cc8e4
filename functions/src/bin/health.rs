//! Lambda for GET /health (see the route table in `koe::routes`). It links and builds only the
//! handler and adapters `koe::wiring::health` names.

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run(koe::wiring::health).await
}
