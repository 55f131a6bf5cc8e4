//! Lambda for POST /agent (see the route table in `koe::routes`). It links and builds only the
//! handler and adapters `koe::wiring::agent` names.

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run(koe::wiring::agent).await
}
