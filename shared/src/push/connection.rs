//! One HTTP/2 connection to an APNs host (h2 over TLS), opened on first use or by
//! [`ApnsConnection::warm`], and opened again when it closed.
//!
//! A connection can die without a word (no FIN, no RST), e.g. while the Lambda container was
//! frozen, and a push sent on it gets no answer: "push state unknown". So before a connection
//! silent for [`ConnectionTimings::check_after_idle`] carries a push, an HTTP/2 PING checks it
//! (as Apple recommends); without a PONG within [`ConnectionTimings::ping`] it is dropped and the
//! push goes on a new one.
//!
//! Our own client rather than a2's: a2 0.10 can be pointed only at Apple's servers, connects only
//! inside a send and gives no access to its HTTP/2 connection. Where a push's request stood when
//! it failed decides whether it may have been delivered ([`classify`](super::classify)).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::PushError;
use super::classify::{classify_answer, classify_stream_error};

/// Where a connection goes.
#[derive(Debug, Clone)]
pub enum ApnsHost {
    /// Apple's host, port 443, TLS.
    Apple(&'static str),
    /// A loopback stand-in over plain TCP (tests).
    Plain(SocketAddr),
}

impl ApnsHost {
    pub const PRODUCTION: ApnsHost = ApnsHost::Apple("api.push.apple.com");
    pub const SANDBOX: ApnsHost = ApnsHost::Apple("api.development.push.apple.com");

    /// The request URI's scheme and authority.
    pub fn origin(&self) -> String {
        match self {
            ApnsHost::Apple(host) => format!("https://{host}"),
            ApnsHost::Plain(addr) => format!("http://{addr}"),
        }
    }
}

/// How long a push and the connection's checks may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionTimings {
    /// The whole push: connecting if needed, sending, APNs's answer. The dispatcher holds each
    /// push to a much shorter budget; this only bounds a request it has already given up on.
    pub request: Duration,
    /// How long APNs may have been silent on a connection before it is checked with a PING.
    pub check_after_idle: Duration,
    /// How long the PONG may take.
    pub ping: Duration,
}

impl Default for ConnectionTimings {
    fn default() -> ConnectionTimings {
        ConnectionTimings {
            request: Duration::from_secs(2),
            check_after_idle: Duration::from_secs(10),
            ping: Duration::from_millis(500),
        }
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The connection's bytes (after TLS), noting when APNs first sent one: its HTTP/2 preface
/// (SETTINGS), which it sends before anything else (RFC 9113, 3.4).
struct Spoken<T> {
    io: T,
    spoke: Arc<AtomicBool>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Spoken<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.spoke.store(true, Ordering::SeqCst);
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Spoken<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

pub struct ApnsConnection {
    host: ApnsHost,
    timings: ConnectionTimings,
    /// The open connection, if any. Held across connecting, so concurrent pushes wait for one
    /// connection instead of each opening its own.
    live: tokio::sync::Mutex<Option<Live>>,
}

/// An open HTTP/2 connection.
struct Live {
    send: SendRequest<Bytes>,
    pings: h2::PingPong,
    /// Set when the connection's task ends (closed by either side, or broken).
    closed: Arc<AtomicBool>,
    /// When APNs last answered on it (the handshake, a response, a PONG).
    heard: Arc<Mutex<Instant>>,
    /// Whether APNs sent anything on it yet (its HTTP/2 preface first).
    spoke: Arc<AtomicBool>,
    task: AbortHandle,
}

/// What a push needs of the open connection.
struct Handles {
    send: SendRequest<Bytes>,
    heard: Arc<Mutex<Instant>>,
    spoke: Arc<AtomicBool>,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Live {
    fn handles(&self) -> Handles {
        Handles {
            send: self.send.clone(),
            heard: self.heard.clone(),
            spoke: self.spoke.clone(),
        }
    }

    /// Whether the connection is alive: APNs was heard within `check_after_idle`, or answers a
    /// PING within `ping`.
    async fn answers(&mut self, timings: &ConnectionTimings) -> bool {
        if self.heard.lock().unwrap().elapsed() < timings.check_after_idle {
            return true;
        }
        let pong = tokio::time::timeout(timings.ping, self.pings.ping(h2::Ping::opaque())).await;
        match pong {
            Ok(Ok(_)) => {
                *self.heard.lock().unwrap() = Instant::now();
                true
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "APNs connection failed its PING: a new one is opened");
                false
            }
            Err(_) => {
                tracing::warn!(
                    ping_ms = timings.ping.as_millis() as u64,
                    "APNs connection did not answer a PING in time: a new one is opened"
                );
                false
            }
        }
    }
}

/// How far a push got, to tell a push that cannot have been delivered from one that may have.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Connecting,
    Sent,
    Answered(u16),
}

impl ApnsConnection {
    pub fn new(host: ApnsHost, timings: ConnectionTimings) -> ApnsConnection {
        ApnsConnection {
            host,
            timings,
            live: tokio::sync::Mutex::new(None),
        }
    }

    pub fn origin(&self) -> String {
        self.host.origin()
    }

    /// Opens the connection if it is not open (a failure is logged; the next push tries again).
    pub async fn warm(&self) {
        if let Err(error) = self.ready().await {
            tracing::warn!(%error, "could not open an APNs connection ahead of a push");
        }
    }

    /// Sends one request (its headers and body) and reads APNs's answer.
    pub async fn send(&self, request: http::Request<()>, body: Bytes) -> Result<(), PushError> {
        let mut stage = Stage::Connecting;
        let answer = tokio::time::timeout(
            self.timings.request,
            self.exchange(request, body, &mut stage),
        )
        .await;
        let secs = self.timings.request.as_secs_f64();
        answer.unwrap_or_else(|_| {
            Err(match stage {
                Stage::Connecting => PushError::Retryable {
                    status: None,
                    reason: format!("no APNs connection ready within {secs} s"),
                },
                Stage::Sent => PushError::MaybeDelivered {
                    reason: format!("no answer from APNs within {secs} s"),
                },
                Stage::Answered(status) => PushError::Retryable {
                    status: None,
                    reason: format!(
                        "APNs answered {status}, its body did not come within {secs} s"
                    ),
                },
            })
        })
    }

    async fn exchange(
        &self,
        request: http::Request<()>,
        body: Bytes,
        stage: &mut Stage,
    ) -> Result<(), PushError> {
        let Handles { send, heard, spoke } = self.ready().await?;
        // A stream that failed before APNs sent its HTTP/2 preface: the HTTP/2 connection was
        // never set up (as a failed handshake), so APNs read nothing of it.
        let failed = |e: h2::Error| {
            if spoke.load(Ordering::SeqCst) {
                classify_stream_error(&e)
            } else {
                PushError::Retryable {
                    status: None,
                    reason: format!(
                        "the APNs connection closed before APNs's HTTP/2 preface, nothing was \
                         read: {e}"
                    ),
                }
            }
        };
        // Waits for a free stream; fails only if the connection is gone: nothing was sent.
        let mut send = send.ready().await.map_err(|e| PushError::Retryable {
            status: None,
            reason: format!("the APNs connection closed before the push was sent: {e}"),
        })?;
        let (response, mut stream) =
            send.send_request(request, false)
                .map_err(|e| PushError::Retryable {
                    status: None,
                    reason: format!("the push could not be handed to the connection: {e}"),
                })?;
        *stage = Stage::Sent;
        // Fails only if the stream already ended (APNs reset it, the connection closed): the
        // response then tells how, `REFUSED_STREAM` included.
        let body_sent = stream.send_data(body, true);
        let response = response.await.map_err(failed)?;
        if let Err(e) = body_sent
            && response.status() == 200
        {
            return Err(failed(e));
        }
        *heard.lock().unwrap() = Instant::now();
        let status = response.status().as_u16();
        if status == 200 {
            return Ok(());
        }
        *stage = Stage::Answered(status);
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|e| PushError::Retryable {
                status: None,
                reason: format!("APNs answered {status}, its body was cut off: {e}"),
            })?;
            let _ = body.flow_control().release_capacity(chunk.len());
            bytes.extend_from_slice(&chunk);
        }
        classify_answer(status, &bytes)
    }

    /// A sender on the open connection, opened first if there is none, it closed, or it was
    /// silent for `check_after_idle` and does not answer a PING. An error means no connection
    /// could be made: nothing was sent.
    async fn ready(&self) -> Result<Handles, PushError> {
        let mut live = self.live.lock().await;
        if let Some(open) = live.as_mut()
            && !open.closed.load(Ordering::SeqCst)
            && open.answers(&self.timings).await
        {
            return Ok(open.handles());
        }
        *live = None;
        let open = self
            .connect()
            .await
            .map_err(|reason| PushError::Retryable {
                status: None,
                reason: format!("could not connect to APNs: {reason}"),
            })?;
        let handles = open.handles();
        *live = Some(open);
        Ok(handles)
    }

    async fn connect(&self) -> Result<Live, String> {
        let io: Box<dyn Io> = match &self.host {
            ApnsHost::Apple(host) => {
                let tcp = TcpStream::connect((*host, 443))
                    .await
                    .map_err(|e| e.to_string())?;
                let _ = tcp.set_nodelay(true);
                let name = rustls::pki_types::ServerName::try_from(*host)
                    .map_err(|e| e.to_string())?
                    .to_owned();
                let tls = tls_connector()
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS: {e}"))?;
                Box::new(tls)
            }
            ApnsHost::Plain(addr) => {
                let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
                let _ = tcp.set_nodelay(true);
                Box::new(tcp)
            }
        };
        let spoke = Arc::new(AtomicBool::new(false));
        let io = Spoken {
            io,
            spoke: spoke.clone(),
        };
        let (send, mut connection) = h2::client::handshake(io)
            .await
            .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
        let pings = connection.ping_pong().expect("taken once, here");
        let closed = Arc::new(AtomicBool::new(false));
        let ended = closed.clone();
        let task = tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "APNs connection ended");
            }
            ended.store(true, Ordering::SeqCst);
        });
        Ok(Live {
            send,
            pings,
            closed,
            heard: Arc::new(Mutex::new(Instant::now())),
            spoke,
            task: task.abort_handle(),
        })
    }
}

/// TLS for APNs (the webpki roots, ALPN `h2`), built once per process.
fn tls_connector() -> tokio_rustls::TlsConnector {
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let mut config = crate::platform::https::tls_config();
        config.alpn_protocols = vec![b"h2".to_vec()];
        Arc::new(config)
    });
    tokio_rustls::TlsConnector::from(config.clone())
}
