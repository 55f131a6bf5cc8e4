//! The AWS SDK's HTTP client: our reqwest client (rustls, compiled-in webpki roots, see
//! [`crate::platform::https`]) behind the SDK's `HttpClient` port.
//!
//! The SDK's own HTTPS client reads and parses the system's certificate store when its first
//! connector is built (a cold start's first DynamoDB request, or its first notification): about
//! 0.7 ms of every cold start of the functions that use the SDK (`bench/run.sh`). With this one
//! the roots are Mozilla's, already in the binary as trust anchors, and the SDK functions share
//! one HTTP stack with the OpenAI and JWKS clients.
//!
//! What the SDK expects of a client, kept here: the connect and read timeouts it passes in
//! [`HttpConnectorSettings`] (one reqwest client per distinct settings, built once and cached),
//! and its error kinds: a timeout is [`ConnectorError::timeout`], a failure to connect or a
//! broken connection is [`ConnectorError::io`] (both retried by the standard retry strategy),
//! anything else [`ConnectorError::other`]. Request bodies are the SDK's in-memory JSON bodies;
//! a streaming body (which no operation we call has) is refused as a user error.

use std::sync::Mutex;
use std::time::Duration;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;

/// The SDK client every AWS client of ours uses. Cheap; nothing is built until the first
/// request.
pub fn sdk_http_client() -> SharedHttpClient {
    SharedHttpClient::new(ReqwestSdkClient::default())
}

#[derive(Debug, Default)]
struct ReqwestSdkClient {
    /// Connectors by their (connect, read) timeouts; in practice one.
    connectors: Mutex<Vec<(Timeouts, SharedHttpConnector)>>,
}

type Timeouts = (Option<Duration>, Option<Duration>);

impl HttpClient for ReqwestSdkClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        let timeouts = (settings.connect_timeout(), settings.read_timeout());
        let mut connectors = self.connectors.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, connector)) = connectors.iter().find(|(t, _)| *t == timeouts) {
            return connector.clone();
        }
        let connector = SharedHttpConnector::new(ReqwestConnector::new(timeouts));
        connectors.push((timeouts, connector.clone()));
        connector
    }
}

#[derive(Debug, Clone)]
struct ReqwestConnector {
    client: reqwest::Client,
}

impl ReqwestConnector {
    fn new((connect, read): Timeouts) -> ReqwestConnector {
        let mut builder = crate::platform::https::client_builder();
        if let Some(connect) = connect {
            builder = builder.connect_timeout(connect);
        }
        if let Some(read) = read {
            builder = builder.read_timeout(read);
        }
        let client = builder
            .build()
            .expect("a reqwest client with compiled-in roots always builds");
        ReqwestConnector { client }
    }
}

impl HttpConnector for ReqwestConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let client = self.client.clone();
        HttpConnectorFuture::new(async move { send(&client, request).await })
    }
}

async fn send(
    client: &reqwest::Client,
    request: HttpRequest,
) -> Result<HttpResponse, ConnectorError> {
    let Some(body) = request.body().bytes().map(<[u8]>::to_vec) else {
        return Err(ConnectorError::user(
            "a streaming request body (the AWS clients here send only in-memory bodies)".into(),
        ));
    };
    let method = reqwest::Method::from_bytes(request.method().as_bytes())
        .map_err(|e| ConnectorError::user(e.into()))?;
    let mut outgoing = client.request(method, request.uri()).body(body);
    for (name, value) in request.headers() {
        outgoing = outgoing.header(name, value);
    }
    let response = outgoing.send().await.map_err(connector_error)?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.bytes().await.map_err(connector_error)?;
    let mut answer = http::Response::builder().status(status);
    if let Some(h) = answer.headers_mut() {
        *h = headers;
    }
    let answer = answer
        .body(SdkBody::from(body))
        .map_err(|e| ConnectorError::other(e.into(), None))?;
    HttpResponse::try_from(answer).map_err(|e| ConnectorError::other(e.into(), None))
}

fn connector_error(e: reqwest::Error) -> ConnectorError {
    if e.is_timeout() {
        ConnectorError::timeout(e.into())
    } else if e.is_connect() || e.is_request() || e.is_body() {
        // Could not connect, or the connection broke while sending or reading.
        ConnectorError::io(e.into())
    } else {
        ConnectorError::other(e.into(), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_runtime_api::client::runtime_components::RuntimeComponentsBuilder;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn post(url: &str) -> HttpRequest {
        let mut request = HttpRequest::new(SdkBody::from(r#"{"TableName":"t"}"#));
        request.set_uri(url).unwrap();
        request.set_method("POST").unwrap();
        // As the SDK sends it: it sets Content-Length itself.
        request
            .headers_mut()
            .insert("x-amz-target", "DynamoDB_20120810.GetItem");
        request.headers_mut().insert("content-length", "17");
        request
    }

    /// A server that reads one request and then answers `answer`, or never if `None`.
    async fn server(answer: Option<&'static str>) -> (String, tokio::task::JoinHandle<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !String::from_utf8_lossy(&seen).contains(r#"{"TableName":"t"}"#) {
                let n = socket.read(&mut buf).await.unwrap();
                assert!(n > 0, "the request ended early");
                seen.extend_from_slice(&buf[..n]);
            }
            match answer {
                Some(body) => {
                    let answer = format!(
                        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/x-amz-json-1.0\r\nx-amzn-requestid: r1\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    socket.write_all(answer.as_bytes()).await.unwrap();
                }
                None => tokio::time::sleep(Duration::from_secs(10)).await,
            }
            String::from_utf8(seen).unwrap()
        });
        (url, task)
    }

    #[tokio::test]
    async fn a_request_goes_out_whole_and_the_answer_comes_back_whole() {
        let (url, server) = server(Some(r#"{"Item":{}}"#)).await;
        let connector = ReqwestConnector::new((Some(Duration::from_secs(1)), None));
        let response = connector.call(post(&url)).await.unwrap();
        let seen = server.await.unwrap().to_ascii_lowercase();
        assert!(seen.starts_with("post / http/1.1\r\n"), "{seen}");
        assert!(
            seen.contains("x-amz-target: dynamodb_20120810.getitem\r\n"),
            "{seen}"
        );
        assert_eq!(
            seen.matches("content-length: 17\r\n").count(),
            1,
            "one Content-Length, not the SDK's and reqwest's both: {seen}"
        );
        assert_eq!(response.status().as_u16(), 400);
        assert_eq!(response.headers().get("x-amzn-requestid"), Some("r1"));
        assert_eq!(response.body().bytes(), Some(&br#"{"Item":{}}"#[..]));
    }

    #[tokio::test]
    async fn nobody_listening_is_an_io_error_the_sdk_retries() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        drop(listener);
        let connector = ReqwestConnector::new((Some(Duration::from_secs(1)), None));
        let error = connector.call(post(&url)).await.unwrap_err();
        assert!(error.is_io(), "{error:?}");
    }

    #[tokio::test]
    async fn no_answer_within_the_read_timeout_is_a_timeout() {
        let (url, _server) = server(None).await;
        let connector = ReqwestConnector::new((
            Some(Duration::from_secs(1)),
            Some(Duration::from_millis(200)),
        ));
        let started = std::time::Instant::now();
        let error = connector.call(post(&url)).await.unwrap_err();
        assert!(error.is_timeout(), "{error:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_connector_is_built_once_per_distinct_timeouts() {
        let client = ReqwestSdkClient::default();
        let components = RuntimeComponentsBuilder::for_tests().build().unwrap();
        let settings = |connect_ms| {
            HttpConnectorSettings::builder()
                .connect_timeout(Duration::from_millis(connect_ms))
                .build()
        };
        client.http_connector(&settings(1000), &components);
        client.http_connector(&settings(1000), &components);
        assert_eq!(client.connectors.lock().unwrap().len(), 1);
        client.http_connector(&settings(2000), &components);
        assert_eq!(client.connectors.lock().unwrap().len(), 2);
    }
}
