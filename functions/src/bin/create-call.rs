//! Lambda for POST /calls (see the route table in `koe::routes`). It links and builds only the
//! handler and adapters `koe::wiring::create_call` names.

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run(koe::wiring::create_call).await
}
