//! Lambda for the dispatcher: the every-minute schedule, requested runs and
//! POST /internal/dispatch (see `koe::entrypoints::dispatch`). It links and builds only the
//! handler and adapters `koe::wiring::dispatch` names.

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::dispatch::run().await
}
