//! Lambda for POST /api/chat streamed (`Accept: text/event-stream`) behind a function URL with
//! response streaming: `koe::routes::Chat` through `koe::lambda::chat_stream`.

#[tokio::main]
async fn main() -> Result<(), koe::lambda::http::Error> {
    koe::lambda::chat_stream::run().await
}
