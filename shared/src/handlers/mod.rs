//! HTTP handlers: plain async functions from `http::Request<Bytes>` to a response or an
//! `ApiError`. They know nothing of Lambda or of the local server.

use bytes::Bytes;
use http::StatusCode;
use serde::Serialize;

pub mod agent;
pub mod body;
pub mod calls;
pub mod capacity;
pub mod chat;
pub mod chat_stream;
pub mod confirm;
pub mod devices;
pub mod dispatch;
pub mod error;
pub mod json;
pub mod meta;

pub type Request = http::Request<Bytes>;
pub type Response = http::Response<Bytes>;

pub fn json_response<T: Serialize>(status: StatusCode, body: &T) -> Response {
    let body = serde_json::to_vec(body).expect("response bodies serialize");
    http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Bytes::from(body))
        .expect("static response parts are valid")
}

/// The first value of query parameter `name`, percent-decoded; `None` when absent or empty.
pub fn query_param(request: &Request, name: &str) -> Option<String> {
    let query = request.uri().query()?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
        .filter(|value| !value.is_empty())
}
