//! The gateway front: both APIs behind stand-in API Gateway HTTP APIs that run each request through lambda_http.

use std::any::TypeId;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{StatusCode, header};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use koe::App;
use koe::app::Visit;
use koe::app::edge::Service;
use koe::app::lambda::dispatch;
use koe::app::ports::Served;
use koe::dispatch::api::Dispatch;
use koe::platform::config::ConfigError;
use koe::platform::endpoint::{Api, Endpoint};
use lambda_http::lambda_runtime::{Context, LambdaEvent};
use lambda_http::request::LambdaRequest;
use lambda_http::{Adapter, Service as _};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// API Gateway's payload cap (HTTP APIs: 10 MB).
pub const PAYLOAD_LIMIT: usize = 10 * 1024 * 1024;

type Answer = http::Response<Full<Bytes>>;
type Invocation = std::pin::Pin<Box<dyn Future<Output = Result<Vec<u8>, String>> + Send>>;
/// A function as the Lambda service sees it: event bytes in, response bytes (or an error) out.
type Function = Arc<dyn Fn(Vec<u8>, Context) -> Invocation + Send + Sync>;

/// Both APIs behind their gateways; dropping it stops them.
pub struct Gateway {
    pub chat_addr: SocketAddr,
    pub agent_addr: SocketAddr,
    events: Arc<Mutex<Vec<Value>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Gateway {
    /// Every event the gateways have sent to a function, in order.
    pub fn events(&self) -> Vec<Value> {
        self.events.lock().unwrap().clone()
    }
}

struct Front {
    api: Api,
    functions: BTreeMap<&'static str, Function>,
    events: Arc<Mutex<Vec<Value>>>,
}

/// Builds every endpoint's function from `app` and serves both APIs on free loopback ports.
///
/// Per request: the route table (`koe::app::find`) picks the function, or API Gateway's
/// own 404 answers; a body over API Gateway's 10 MB cap gets its 413. The request becomes the
/// event JSON API Gateway would send ([`event`]); an HTTP function reads it as the runtime does
/// (`LambdaEvent<LambdaRequest>` from the bytes) through `lambda_http::Adapter`, the service
/// `lambda_http::run` wraps around `handle_event`; the dispatch function gets it as
/// `LambdaEvent<serde_json::Value>` through `koe::app::lambda::dispatch::handle`. The JSON the
/// function hands back becomes the HTTP answer as API Gateway makes it ([`http_response`]).
pub async fn start(app: App) -> Result<Gateway, ConfigError> {
    let functions = functions(&app).await?;
    let events = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let mut addrs = Vec::new();
    for api in [Api::Chat, Api::Agent] {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        addrs.push(listener.local_addr().expect("a bound address"));
        let front = Arc::new(Front {
            api,
            functions: functions.clone(),
            events: events.clone(),
        });
        tasks.push(tokio::spawn(serve(listener, front)));
    }
    Ok(Gateway {
        chat_addr: addrs[0],
        agent_addr: addrs[1],
        events,
        tasks,
    })
}

/// One function per endpoint, by binary name.
async fn functions(app: &App) -> Result<BTreeMap<&'static str, Function>, ConfigError> {
    type Building<'a> = std::pin::Pin<
        Box<dyn Future<Output = Result<(&'static str, Function), ConfigError>> + Send + 'a>,
    >;
    struct Build<'a>(&'a App, Vec<Building<'a>>);
    impl<'a> Visit for Build<'a> {
        fn visit<E: Served>(&mut self) {
            let app = self.0;
            self.1.push(Box::pin(async move {
                let function = if TypeId::of::<E>() == TypeId::of::<Dispatch>() {
                    dispatch_function(Arc::new(app.service::<Dispatch>().await?))
                } else {
                    http_function(Arc::new(app.service::<E>().await?))
                };
                Ok((E::ROUTE.binary, function))
            }));
        }
    }
    let mut build = Build(app, Vec::new());
    koe::app::each(&mut build);
    let mut functions = BTreeMap::new();
    for building in build.1 {
        let (binary, function) = building.await?;
        functions.insert(binary, function);
    }
    Ok(functions)
}

/// An HTTP function: what `koe::app::lambda::http::run` hands to `lambda_http::run`, called
/// the way the runtime calls it.
fn http_function<E: Endpoint>(service: Arc<Service<E>>) -> Function {
    Arc::new(move |event: Vec<u8>, context: Context| {
        let service = service.clone();
        Box::pin(async move {
            let payload: LambdaRequest =
                serde_json::from_slice(&event).map_err(|e| e.to_string())?;
            let mut adapter = Adapter::from(lambda_http::service_fn(
                move |request: lambda_http::Request| {
                    let service = service.clone();
                    async move {
                        Ok::<_, Infallible>(
                            koe::app::lambda::http::handle_event(&service, request).await,
                        )
                    }
                },
            ));
            let Ok(()) = std::future::poll_fn(|cx| adapter.poll_ready(cx)).await;
            let Ok(response) = adapter.call(LambdaEvent::new(payload, context)).await;
            serde_json::to_vec(&response).map_err(|e| e.to_string())
        })
    })
}

/// The dispatch function: raw JSON events through `koe::app::lambda::dispatch::handle`.
fn dispatch_function(service: Arc<Service<Dispatch>>) -> Function {
    Arc::new(move |event: Vec<u8>, context: Context| {
        let service = service.clone();
        Box::pin(async move {
            let payload: Value = serde_json::from_slice(&event).map_err(|e| e.to_string())?;
            let response = dispatch::handle(&service, LambdaEvent::new(payload, context))
                .await
                .map_err(|e| e.to_string())?;
            serde_json::to_vec(&response).map_err(|e| e.to_string())
        })
    })
}

async fn serve(listener: TcpListener, front: Arc<Front>) {
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            continue;
        };
        let front = front.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let front = front.clone();
                async move { Ok::<_, Infallible>(front.answer(request, peer.ip()).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

impl Front {
    async fn answer(&self, request: hyper::Request<Incoming>, source: IpAddr) -> Answer {
        let request_id = random_id(16);
        let (parts, body) = request.into_parts();
        let announced = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if announced.is_some_and(|n| n > PAYLOAD_LIMIT as u64) {
            return too_large(&request_id);
        }
        let body = match Limited::new(body, PAYLOAD_LIMIT).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.is::<LengthLimitError>() => return too_large(&request_id),
            Err(_) => return gateway_error(StatusCode::BAD_REQUEST, "Bad Request", &request_id),
        };
        let Ok(route) = koe::app::find(self.api, &parts.method, parts.uri.path()) else {
            return gateway_error(StatusCode::NOT_FOUND, "Not Found", &request_id);
        };
        let function = self.functions[route.binary].clone();
        let event = event(route, &parts, &body, source, &request_id, SystemTime::now());
        self.events.lock().unwrap().push(event.clone());
        let mut context = Context::default();
        context.request_id = uuid();
        let arn = "arn:aws:lambda:eu-west-1:123456789012:function";
        context.invoked_function_arn = format!("{arn}:{}", route.binary);
        // The function's timeout, as Lambda gives it (the route's is the template's).
        context.deadline = (SystemTime::now() + route.timeout)
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        context.xray_trace_id = Some(format!("Root=1-{}-{}", random_id(8), random_id(24)));
        let bytes = serde_json::to_vec(&event).expect("an event is JSON");
        let mut answer = match function(bytes, context).await {
            Ok(out) => http_response(&out),
            Err(e) => {
                tracing::error!(error = %e, function = route.binary, "function error");
                internal_error(&request_id)
            }
        };
        set(&mut answer, "apigw-requestid", &request_id);
        answer
    }
}

mod payload;

pub use self::payload::{event, http_response, uuid};
use self::payload::{gateway_error, internal_error, random_id, set, too_large};
