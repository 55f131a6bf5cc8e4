//! Lambda for the dispatcher: the every-minute schedule, requested runs and
//! POST /internal/dispatch (the `Dispatch` endpoint; see `koe::entrypoints::dispatch`).

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::dispatch::run().await
}
