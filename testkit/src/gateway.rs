//! The gateway front: both APIs behind stand-in API Gateway HTTP APIs that run each request through lambda_http.

use std::any::TypeId;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use koe::App;
use koe::config::ConfigError;
use koe::edge::Service;
use koe::lambda::dispatch;
use koe::routes::{Api, Dispatch, Endpoint, Route, Visit};
use lambda_http::lambda_runtime::{Context, LambdaEvent};
use lambda_http::request::LambdaRequest;
use lambda_http::{Adapter, Service as _};
use serde_json::{Map, Value, json};
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
/// Per request: the route table (`koe::routes::find`) picks the function, or API Gateway's
/// own 404 answers; a body over API Gateway's 10 MB cap gets its 413. The request becomes the
/// event JSON API Gateway would send ([`event`]); an HTTP function reads it as the runtime does
/// (`LambdaEvent<LambdaRequest>` from the bytes) through `lambda_http::Adapter`, the service
/// `lambda_http::run` wraps around `handle_event`; the dispatch function gets it as
/// `LambdaEvent<serde_json::Value>` through `koe::lambda::dispatch::handle`. The JSON the
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
        fn visit<E: Endpoint>(&mut self) {
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
    koe::routes::each(&mut build);
    let mut functions = BTreeMap::new();
    for building in build.1 {
        let (binary, function) = building.await?;
        functions.insert(binary, function);
    }
    Ok(functions)
}

/// An HTTP function: what `koe::lambda::http::run` hands to `lambda_http::run`, called
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
                            koe::lambda::http::handle_event(&service, request).await,
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

/// The dispatch function: raw JSON events through `koe::lambda::dispatch::handle`.
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
        let Ok(route) = koe::routes::find(self.api, &parts.method, parts.uri.path()) else {
            return gateway_error(StatusCode::NOT_FOUND, "Not Found", &request_id);
        };
        let function = self.functions[route.binary].clone();
        let event = event(route, &parts, &body, source, &request_id, SystemTime::now());
        self.events.lock().unwrap().push(event.clone());
        let mut context = Context::default();
        context.request_id = uuid();
        let arn = "arn:aws:lambda:eu-west-1:123456789012:function";
        context.invoked_function_arn = format!("{arn}:{}", route.binary);
        context.deadline = (SystemTime::now() + Duration::from_secs(30))
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

/// The API Gateway HTTP API payload v2 event of one request to `route`.
pub fn event(
    route: &Route,
    parts: &http::request::Parts,
    body: &[u8],
    source: IpAddr,
    request_id: &str,
    now: SystemTime,
) -> Value {
    let mut headers = Map::new();
    let mut cookies = Vec::new();
    for name in parts.headers.keys() {
        let values = parts.headers.get_all(name).iter();
        let values: Vec<_> = values
            .map(|v| String::from_utf8_lossy(v.as_bytes()))
            .collect();
        if name == header::COOKIE {
            let each = values.iter().flat_map(|v| v.split(';')).map(str::trim);
            cookies.extend(each.filter(|c| !c.is_empty()).map(String::from));
        } else {
            headers.insert(name.as_str().to_owned(), values.join(",").into());
        }
    }
    headers.insert("x-forwarded-for".into(), source.to_string().into());
    headers.insert("x-forwarded-proto".into(), "https".into());
    headers.insert("x-forwarded-port".into(), "443".into());
    let header = |name: &str| headers.get(name).and_then(Value::as_str).map(String::from);
    let user_agent = header("user-agent").unwrap_or_default();
    let domain = header("host").unwrap_or_else(|| "localhost".into());
    let raw_query = parts.uri.query().unwrap_or_default();
    let mut query = Map::new();
    for (name, value) in form_urlencoded::parse(raw_query.as_bytes()) {
        match query.get_mut(name.as_ref()) {
            Some(Value::String(joined)) => *joined = format!("{joined},{value}"),
            _ => {
                query.insert(name.into_owned(), value.into_owned().into());
            }
        }
    }
    let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let time = chrono::DateTime::<chrono::Utc>::from(now).format("%d/%b/%Y:%H:%M:%S %z");
    let path = parts.uri.path();
    let mut event = json!({
        "version": "2.0",
        "routeKey": format!("{} {}", route.method, route.path),
        "rawPath": path,
        "rawQueryString": raw_query,
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": route.api.template_id().to_lowercase(),
            "domainName": domain,
            "domainPrefix": domain.split('.').next().unwrap_or_default(),
            "http": {
                "method": parts.method.as_str(),
                "path": path,
                "protocol": format!("{:?}", parts.version),
                "sourceIp": source.to_string(),
                "userAgent": user_agent,
            },
            "requestId": request_id,
            "routeKey": format!("{} {}", route.method, route.path),
            "stage": "$default",
            "time": time.to_string(),
            "timeEpoch": since_epoch.as_millis() as u64,
        },
        "isBase64Encoded": false,
    });
    if !cookies.is_empty() {
        event["cookies"] = json!(cookies);
    }
    if !query.is_empty() {
        event["queryStringParameters"] = Value::Object(query);
    }
    if !body.is_empty() {
        match std::str::from_utf8(body) {
            Ok(text) => event["body"] = text.into(),
            Err(_) => {
                event["body"] = BASE64.encode(body).into();
                event["isBase64Encoded"] = true.into();
            }
        }
    }
    event
}

/// A function's response JSON as API Gateway answers it: `statusCode`, `headers`, `cookies`
/// as `set-cookie`, `body` (decoded if `isBase64Encoded`); JSON without a `statusCode` is a
/// 200 with that JSON as its body (payload v2's format inference).
pub fn http_response(out: &[u8]) -> Answer {
    let Ok(out) = serde_json::from_slice::<Value>(out) else {
        return internal_error(&random_id(16));
    };
    let Some(status) = out.get("statusCode").and_then(Value::as_u64) else {
        let mut answer = http::Response::new(Full::new(Bytes::from(out.to_string())));
        set(&mut answer, "content-type", "application/json");
        return answer;
    };
    let text = out.get("body").and_then(Value::as_str).unwrap_or_default();
    let body = if out.get("isBase64Encoded") == Some(&Value::Bool(true)) {
        BASE64
            .decode(text)
            .expect("isBase64Encoded bodies are base64")
    } else {
        text.as_bytes().to_vec()
    };
    let mut answer = http::Response::new(Full::new(Bytes::from(body)));
    *answer.status_mut() = StatusCode::from_u16(status as u16).expect("a valid status");
    if let Some(Value::Object(headers)) = out.get("headers") {
        for (name, value) in headers {
            if let Some(value) = value.as_str() {
                set(&mut answer, name, value);
            }
        }
    }
    if let Some(Value::Array(cookies)) = out.get("cookies") {
        for cookie in cookies.iter().filter_map(Value::as_str) {
            let value = HeaderValue::from_str(cookie).expect("a cookie is a header value");
            answer.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    answer
}

/// API Gateway's own answers (no function ran): `{"message": ...}`.
fn gateway_error(status: StatusCode, message: &str, request_id: &str) -> Answer {
    let body = json!({ "message": message }).to_string();
    let mut answer = http::Response::new(Full::new(Bytes::from(body)));
    *answer.status_mut() = status;
    set(&mut answer, "content-type", "application/json");
    set(&mut answer, "apigw-requestid", request_id);
    answer
}

/// What API Gateway answers when the function fails or answers what it cannot read.
fn internal_error(request_id: &str) -> Answer {
    let status = StatusCode::INTERNAL_SERVER_ERROR;
    gateway_error(status, "Internal Server Error", request_id)
}

/// 413, and the connection closed: the rest of the body is not read.
fn too_large(request_id: &str) -> Answer {
    let status = StatusCode::PAYLOAD_TOO_LARGE;
    let mut answer = gateway_error(status, "Request Entity Too Large", request_id);
    set(&mut answer, "connection", "close");
    answer
}

fn set(answer: &mut Answer, name: &str, value: &str) {
    let name = http::HeaderName::from_bytes(name.as_bytes()).expect("a header name");
    let value = HeaderValue::from_str(value).expect("a header value");
    answer.headers_mut().insert(name, value);
}

fn random_id(len: usize) -> String {
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    (0..len)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

/// A Lambda invocation id's shape (a UUID).
pub fn uuid() -> String {
    let hex = format!("{:032x}", fastrand::u128(..));
    let (a, b, c, d, e) = (
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..],
    );
    format!("{a}-{b}-{c}-{d}-{e}")
}
