//! A loopback HTTP/2 server that breaks a push request the ways a connection to APNs can break,
//! and the error a2 gives for each, to test `koe::push::classify` on real client errors.
//!
//! a2 0.10 cannot be pointed at a local server (TOOLCHAIN.md), so [`a2_error`] sends the request
//! with the client a2 sends with (hyper-util's legacy client, HTTP/2 only; plain TCP instead of
//! TLS) and wraps its error as a2 does: the request's own failure as `a2::Error::ClientError`, a
//! body cut off after an error status as `a2::Error::ConnectionError`. The server counts the
//! requests it read in full, so a test knows whether APNs could have delivered the push.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// How the server breaks the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Break {
    /// Resets the stream with `REFUSED_STREAM` without reading it (RFC 9113, 8.7: not
    /// processed), as a server over its stream limit or shutting down does.
    RefuseStream,
    /// Reads the whole request, then resets its stream (`INTERNAL_ERROR`): APNs may have
    /// delivered it.
    ResetAfterRead,
    /// Reads the whole request, then closes the TCP connection without a word.
    CloseAfterRead,
    /// Reads the whole request, answers this status, and resets the stream in the middle of the
    /// answer's body (its reason is lost; the status said it was refused).
    CutErrorBody(u16),
    /// Closes each TCP connection as soon as it is accepted, before the HTTP/2 handshake.
    CloseBeforeHandshake,
}

/// A running server; it stops with the test's runtime.
pub struct BrokenApns {
    pub addr: std::net::SocketAddr,
    read: Arc<AtomicUsize>,
}

impl BrokenApns {
    pub async fn start(how: Break) -> BrokenApns {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let read = Arc::new(AtomicUsize::new(0));
        let counter = read.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                if how == Break::CloseBeforeHandshake {
                    drop(socket);
                    continue;
                }
                tokio::spawn(serve(socket, how, counter.clone()));
            }
        });
        BrokenApns { addr, read }
    }

    /// Requests read in full (headers and body) so far.
    pub fn read(&self) -> usize {
        self.read.load(Ordering::SeqCst)
    }
}

async fn serve(socket: tokio::net::TcpStream, how: Break, read: Arc<AtomicUsize>) {
    let Ok(mut connection) = h2::server::handshake(socket).await else {
        return;
    };
    let (close, mut closing) = mpsc::channel::<()>(1);
    loop {
        tokio::select! {
            next = connection.accept() => {
                let Some(Ok((request, respond))) = next else { return };
                tokio::spawn(answer(request, respond, how, read.clone(), close.clone()));
            }
            // Dropping the connection closes the socket: no GOAWAY, no reset.
            _ = closing.recv() => return,
        }
    }
}

async fn answer(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    how: Break,
    read: Arc<AtomicUsize>,
    close: mpsc::Sender<()>,
) {
    if how == Break::RefuseStream {
        respond.send_reset(h2::Reason::REFUSED_STREAM);
        return;
    }
    let mut body = request.into_body();
    while let Some(chunk) = body.data().await {
        let Ok(chunk) = chunk else { return };
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    read.fetch_add(1, Ordering::SeqCst);
    match how {
        Break::ResetAfterRead => respond.send_reset(h2::Reason::INTERNAL_ERROR),
        Break::CloseAfterRead => {
            // The stream stays open (no reset) until the connection is gone.
            let _ = close.send(()).await;
            close.closed().await;
            drop(respond);
        }
        Break::CutErrorBody(status) => {
            let head = http::Response::builder()
                .status(status)
                .body(())
                .expect("a valid response");
            if let Ok(mut stream) = respond.send_response(head, false) {
                let _ = stream.send_data(Bytes::from_static(br#"{"reason":"Too"#), false);
                // Time for the client to hand the status on before the reset discards it.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                stream.send_reset(h2::Reason::INTERNAL_ERROR);
            }
        }
        Break::RefuseStream | Break::CloseBeforeHandshake => unreachable!("handled above"),
    }
}

/// One push request to `addr` as a2 makes it (POST `/3/device/<token>`, HTTP/2 only) and the a2
/// error it ends in; panics if it succeeds.
pub async fn a2_error_at(addr: std::net::SocketAddr) -> a2::Error {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let request = http::Request::post(format!("http://{addr}/3/device/{}", "ab".repeat(32)))
        .header("apns-push-type", "voip")
        .header("apns-topic", "com.example.koe.voip")
        .body(Full::new(Bytes::from_static(
            br#"{"aps":{},"callId":"c1"}"#,
        )))
        .expect("a valid request");
    let response = match client.request(request).await {
        Ok(response) => response,
        Err(error) => return a2::Error::ClientError(error),
    };
    let status = response.status();
    match response.into_body().collect().await {
        Err(error) => a2::Error::ConnectionError(error),
        Ok(_) => panic!("the broken server answered {status} in full"),
    }
}

/// Starts a server that breaks the request `how`, makes one push request to it and returns its
/// a2 error and how many requests the server read in full.
pub async fn a2_error(how: Break) -> (a2::Error, usize) {
    let server = BrokenApns::start(how).await;
    let error = a2_error_at(server.addr).await;
    (error, server.read())
}

/// The a2 error of a push to a port nothing listens on.
pub async fn a2_connect_error() -> a2::Error {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    drop(listener);
    a2_error_at(addr).await
}
