//! Lambda for GET /api/error (see the route table in `koe::routes`). It links and builds only the
//! handler and adapters `koe::wiring::error_test` names.

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run(koe::wiring::error_test).await
}
