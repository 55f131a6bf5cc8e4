//! A loopback HTTP/2 server that breaks a push request the ways a connection to APNs can break,
//! or answers it as APNs refuses a push, and the production client's answer to it: a push pool of
//! `koe::push::apns` connections as the dispatcher is wired (`koe::app::wiring`), pointed at this
//! server over plain TCP instead of Apple over TLS. The server counts the requests it read in
//! full, so a test knows whether APNs could have delivered the push.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::Duration;

use bytes::Bytes;
use koe::push::apns::{ApnsHosts, ApnsSender};
use koe::push::connection::{ApnsHost, ConnectionTimings};
use koe::push::pool::{PoolSettings, PushPool};
use koe::push::{PushError, PushSender};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::push_and_device;

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
    /// Reads the whole request and answers as APNs refuses a push: this status and the body
    /// `{"reason": "<reason>"}`.
    Answer(u16, &'static str),
    /// Reads the whole request and never answers it (the connection stays up, PINGs answered).
    NoAnswer,
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
        Break::Answer(status, reason) => {
            let head = http::Response::builder()
                .status(status)
                .header("apns-id", "00000000-0000-0000-0000-000000000000")
                .body(())
                .expect("a valid response");
            if let Ok(mut stream) = respond.send_response(head, false) {
                let body = serde_json::json!({ "reason": reason }).to_string();
                let _ = stream.send_data(Bytes::from(body), true);
            }
        }
        Break::NoAnswer => {
            std::future::pending::<()>().await;
            drop(respond);
        }
        Break::RefuseStream | Break::CloseBeforeHandshake => unreachable!("handled above"),
    }
}

/// How long the production client waits for an answer here (a push that gets none in this time
/// is given up on, as at the dispatcher's budget).
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(500);

/// The APNs client as production wires it (`ApnsSender::connections` in a `PushPool`, one
/// provider token signed with the test key), its connections going to `addr` over plain TCP.
pub fn production_client(addr: std::net::SocketAddr) -> PushPool {
    let config = super::apns_config();
    let hosts = ApnsHosts {
        production: ApnsHost::Plain(addr),
        sandbox: ApnsHost::Plain(addr),
    };
    let timings = ConnectionTimings {
        request: REQUEST_TIMEOUT,
        ..ConnectionTimings::default()
    };
    let factory = ApnsSender::connections_to(&config, hosts, timings).expect("the test key");
    PushPool::new(factory, PoolSettings::default())
}

/// One call's push (to the device token `"ab" × 32`) through the production client to `addr`,
/// and its failure; panics if it is accepted.
pub async fn push_error_at(addr: std::net::SocketAddr) -> PushError {
    let (push, device) = push_and_device("c1", "d1");
    match production_client(addr).send(&push, &device).await {
        Err(error) => error,
        Ok(()) => panic!("the broken server accepted the push"),
    }
}

/// Starts a server that breaks the request `how`, sends one push to it through the production
/// client and returns its failure and how many requests the server read in full.
pub async fn push_error(how: Break) -> (PushError, usize) {
    let server = BrokenApns::start(how).await;
    let error = push_error_at(server.addr).await;
    (error, server.read())
}

/// The failure of a push to a port nothing listens on (the connection is refused).
pub async fn push_error_refused_connection() -> PushError {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    drop(listener);
    push_error_at(addr).await
}
