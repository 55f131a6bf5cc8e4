//! Lambda for POST /api/chat (see the route table in `koe::routes`). It links and builds only the
//! handler and adapters `koe::wiring::chat` names.

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run(koe::wiring::chat).await
}
