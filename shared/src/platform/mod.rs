//! The platform every feature stands on: the Lambda-free plumbing of a request (its types, body
//! reading, JSON object parsing, the one error type), configuration and secrets, AWS clients,
//! HTTPS, the clock, deadlines, metrics and telemetry. It imports no feature and no port.

use bytes::Bytes;
use http::StatusCode;
use serde::Serialize;

pub mod aws;
pub mod aws_http;
pub mod body;
pub mod clock;
pub mod config;
pub mod deadline;
pub mod endpoint;
pub mod error;
pub mod https;
pub mod json;
pub mod metrics;
pub mod secrets;
pub mod telemetry;

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
