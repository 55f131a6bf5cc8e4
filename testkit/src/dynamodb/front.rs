//! What the proxies in front of DynamoDB Local share (`reply_drop`, `limits_proxy`): the accept
//! loop, the operation a request names, and an upstream answer passed back as it came.

use std::future::Future;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

pub(super) type Response = hyper::Response<Full<Bytes>>;

/// Serves HTTP/1 on `listener` with `handle`. An `Err` from it ends the connection unanswered,
/// as a network failure would.
pub(super) async fn serve<H, F>(listener: TcpListener, handle: H)
where
    H: Fn(hyper::Request<hyper::body::Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response, std::io::Error>> + Send + 'static,
{
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(handle))
                .await;
        });
    }
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
