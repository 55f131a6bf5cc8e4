//! Lambda for the dispatcher: the every-minute schedule, requested runs and
//! POST /internal/dispatch (see `koe::entrypoints::dispatch`).

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::dispatch::run().await
}
