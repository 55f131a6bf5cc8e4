//! Lambda for POST /api/chat streamed (`Accept: text/event-stream`) behind a function URL with
//! response streaming: `koe::endpoints::Chat` through `koe::entrypoints::chat_stream`.

#[tokio::main]
async fn main() -> Result<(), koe::entrypoints::lambda::Error> {
    koe::entrypoints::chat_stream::run().await
}
