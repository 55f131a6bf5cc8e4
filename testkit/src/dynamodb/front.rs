//! What the proxies in front of DynamoDB Local share (`reply_drop`, `limits_proxy`): the
//! operation a request names, and an upstream answer passed back as it came.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::Full;

pub(super) use crate::loopback::Response;
use crate::loopback::{Loopback, Request};

/// Starts the proxy `what` on a free loopback port: `handle` answers each request with the
/// proxy's `shared` state; its `Err` hangs up, as a network failure would.
pub(super) async fn start_proxy<S, H, F>(what: &str, shared: &Arc<S>, handle: H) -> Loopback
where
    S: Send + Sync + 'static,
    H: Fn(Arc<S>, Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response, std::io::Error>> + Send + 'static,
{
    let shared = shared.clone();
    let serve = move |request| handle(shared.clone(), request);
    Loopback::start_or_hang_up("127.0.0.1:0".parse().unwrap(), serve)
        .await
        .unwrap_or_else(|e| panic!("bind {what}: {e}"))
}

/// The operation (`PutItem`, `Query`, ...) of a request, from its `X-Amz-Target`.
pub(super) fn operation(headers: &HeaderMap) -> String {
    headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.rsplit('.').next())
        .unwrap_or_default()
        .to_owned()
}

/// An answer with `status`, `headers` (less the framing ones, which hyper sets) and `body`.
pub(super) fn respond(status: u16, headers: &HeaderMap, body: Bytes) -> Response {
    let mut response = hyper::Response::builder().status(status);
    for (name, value) in headers {
        if name != http::header::CONTENT_LENGTH && name != http::header::TRANSFER_ENCODING {
            response = response.header(name.as_str(), value.as_bytes());
        }
    }
    response
        .body(Full::new(body))
        .expect("a response from a valid one")
}
