//! Lambda for the dispatcher: the every-minute schedule, requested runs and
//! POST /internal/dispatch (the `Dispatch` endpoint; see `koe::app::lambda::dispatch`).

#[tokio::main]
async fn main() -> Result<(), koe::app::lambda::http::Error> {
    koe::app::lambda::dispatch::run().await
}
