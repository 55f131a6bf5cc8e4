//! Lambda for the dispatcher: the every-minute schedule, requested runs and
//! POST /internal/dispatch (the `Dispatch` endpoint; see `koe::lambda::dispatch`).

#[tokio::main]
async fn main() -> Result<(), koe::lambda::http::Error> {
    koe::lambda::dispatch::run().await
}
