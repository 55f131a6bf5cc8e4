//! A loopback stand-in APNs over HTTP/2 (plain TCP), for `koe::push::apns` itself: answers 200
//! to every push after reading it, records each push's `authorization` header, and can make its
//! open connections go silent (they stay open, but nothing on them is read or answered, PINGs
//! included), as a connection that died without a FIN or RST looks to the client.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// A running stand-in; it stops with the test's runtime.
pub struct StandInApns {
    pub addr: std::net::SocketAddr,
    state: Arc<State>,
}

struct State {
    connections: AtomicUsize,
    accepted: AtomicUsize,
    bearers: Mutex<Vec<String>>,
    /// How many times the open connections were silenced; a connection goes silent once it is
    /// higher than when it was accepted.
    silenced: watch::Sender<u64>,
}

impl StandInApns {
    pub async fn start() -> StandInApns {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(State {
            connections: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
            bearers: Mutex::new(Vec::new()),
            silenced: watch::channel(0).0,
        });
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                shared.connections.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(socket, shared.clone()));
            }
        });
        StandInApns { addr, state }
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// Pushes read in full and answered 200.
    pub fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }

    /// Every `authorization` header seen, one per push.
    pub fn bearers(&self) -> Vec<String> {
        self.state.bearers.lock().unwrap().clone()
    }

    /// The distinct `authorization` headers seen (one per provider token).
    pub fn distinct_bearers(&self) -> usize {
        let bearers = self.state.bearers.lock().unwrap();
        bearers.iter().collect::<HashSet<_>>().len()
    }

    /// Every connection open now stops reading and answering, and stays open; connections made
    /// later are served.
    pub fn silence_open_connections(&self) {
        self.state.silenced.send_modify(|n| *n += 1);
    }
}

async fn serve(socket: tokio::net::TcpStream, state: Arc<State>) {
    let mut silenced = state.silenced.subscribe();
    let born = *silenced.borrow_and_update();
    let Ok(mut connection) = h2::server::handshake(socket).await else {
        return;
    };
    loop {
        tokio::select! {
            next = connection.accept() => {
                let Some(Ok((request, respond))) = next else { return };
                tokio::spawn(answer(request, respond, state.clone()));
            }
            _ = async { silenced.wait_for(|n| *n > born).await.map(|_| ()) } => break,
        }
    }
    // Holds the connection (its socket open) and never polls it again.
    std::future::pending::<()>().await;
    drop(connection);
}

async fn answer(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    state: Arc<State>,
) {
    if let Some(bearer) = request.headers().get("authorization") {
        let bearer = bearer.to_str().unwrap_or_default().to_owned();
        state.bearers.lock().unwrap().push(bearer);
    }
    let mut body = request.into_body();
    while let Some(chunk) = body.data().await {
        let Ok(chunk) = chunk else { return };
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let head = http::Response::builder()
        .status(200)
        .header("apns-id", "00000000-0000-0000-0000-000000000000")
        .body(())
        .expect("a valid response");
    if respond.send_response(head, true).is_ok() {
        state.accepted.fetch_add(1, Ordering::SeqCst);
    }
}
