//! Lambda for PUT /devices (see the route table in `koe::routes`). It links and builds only the
//! handler and adapters `koe::wiring::put_device` names.

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::lambda::run(koe::wiring::put_device).await
}
