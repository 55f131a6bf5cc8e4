//! Lambda for POST /api/chat streamed (`Accept: text/event-stream`) behind a function URL with
//! response streaming: `koe::chat::api::Chat` through `koe::app::lambda::chat_stream`.

#[tokio::main]
async fn main() -> Result<(), koe::app::lambda::http::Error> {
    koe::app::lambda::chat_stream::run().await
}
