//! The server every loopback stand-in runs on: a port (free, or the one asked for), HTTP/1 on
//! each connection through the stand-in's handler, and a stop (connections closed) on drop.

use std::future::Future;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

pub type Request = hyper::Request<Incoming>;
pub type Response = hyper::Response<Full<Bytes>>;

/// Starts a server with `start_on` on a free loopback port; `what` names it should binding fail.
pub async fn on_a_free_port<T, F>(what: &str, start_on: impl FnOnce(SocketAddr) -> F) -> T
where
    F: Future<Output = std::io::Result<T>>,
{
    start_on("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap_or_else(|e| panic!("bind the {what}: {e}"))
}

/// For a stand-in run as a process (`src/bin/`): the server `started` on `addr`; if it could not
/// listen, the process `name` says so on stderr and exits with 1.
pub fn listening_or_exit<T>(name: &str, addr: SocketAddr, started: std::io::Result<T>) -> T {
    started.unwrap_or_else(|e| {
        eprintln!("{name}: cannot listen on {addr}: {e}");
        std::process::exit(1)
    })
}

/// For a stand-in run as a process: `url`, its one line on stdout (flushed, for the script that
/// started it to read).
pub fn print_url(url: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "{url}");
    let _ = stdout.flush();
}

/// A running stand-in server; dropping it stops it and closes every connection.
pub struct Loopback {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Loopback {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Loopback {
    /// Serves `handle` on a free loopback port; `what` names the stand-in should binding fail.
    pub async fn start<H, F>(what: &str, handle: H) -> Loopback
    where
        H: Fn(Request) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Response> + Send + 'static,
    {
        on_a_free_port(what, |addr| Loopback::start_on(addr, handle)).await
    }

    /// Serves `handle` on `addr` (port 0: a free port).
    pub async fn start_on<H, F>(addr: SocketAddr, handle: H) -> std::io::Result<Loopback>
    where
        H: Fn(Request) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Response> + Send + 'static,
    {
        Loopback::start_or_hang_up(addr, move |request| {
            let answer = handle(request);
            async move { Ok(answer.await) }
        })
        .await
    }

    /// As [`Loopback::start_on`], except that an `Err` from `handle` ends the connection
    /// unanswered, as a network failure would.
    pub async fn start_or_hang_up<H, F>(addr: SocketAddr, handle: H) -> std::io::Result<Loopback>
    where
        H: Fn(Request) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Result<Response, std::io::Error>> + Send + 'static,
    {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(serve(listener, handle));
        Ok(Loopback { addr, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://host:port`: the endpoint a client is pointed at.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Accepts connections until aborted; the connections live in a `JoinSet` owned by this task,
/// so aborting it aborts them too.
async fn serve<H, F>(listener: TcpListener, handle: H)
where
    H: Fn(Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response, std::io::Error>> + Send + 'static,
{
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        // Streamed replies are many small writes, sent as they come (as a real service's are).
        let _ = stream.set_nodelay(true);
        while connections.try_join_next().is_some() {}
        let handle = handle.clone();
        connections.spawn(async move {
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(handle))
                .await;
        });
    }
}

/// A request's body, read to its end (empty if reading it fails).
pub async fn body_bytes(body: Incoming) -> Bytes {
    body.collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default()
}

/// The operation an AWS JSON request names in `X-Amz-Target` (`Service.Operation`), or "".
pub fn amz_target(request: &Request) -> String {
    request
        .headers()
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// An AWS JSON 1.1 answer, as the SDK reads one (errors carry their `__type` in `body`).
pub fn aws_json_1_1(status: u16, body: Value) -> Response {
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/x-amz-json-1.1")
        .header("x-amzn-requestid", "00000000-0000-0000-0000-000000000000")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

/// A JSON answer with `status` and `body`.
pub fn json(status: u16, body: impl Into<Bytes>) -> Response {
    hyper::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body.into()))
        .expect("a valid response")
}
