//! API Gateway's side of the wire: the payload v2 event, the function's answer, and errors.

use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use http_body_util::Full;
use koe::platform::endpoint::Route;
use serde_json::{Map, Value, json};

use super::Answer;

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
pub(super) fn gateway_error(status: StatusCode, message: &str, request_id: &str) -> Answer {
    let body = json!({ "message": message }).to_string();
    let mut answer = http::Response::new(Full::new(Bytes::from(body)));
    *answer.status_mut() = status;
    set(&mut answer, "content-type", "application/json");
    set(&mut answer, "apigw-requestid", request_id);
    answer
}

/// What API Gateway answers when the function fails or answers what it cannot read.
pub(super) fn internal_error(request_id: &str) -> Answer {
    let status = StatusCode::INTERNAL_SERVER_ERROR;
    gateway_error(status, "Internal Server Error", request_id)
}

/// 413, and the connection closed: the rest of the body is not read.
pub(super) fn too_large(request_id: &str) -> Answer {
    let status = StatusCode::PAYLOAD_TOO_LARGE;
    let mut answer = gateway_error(status, "Request Entity Too Large", request_id);
    set(&mut answer, "connection", "close");
    answer
}

pub(super) fn set(answer: &mut Answer, name: &str, value: &str) {
    let name = http::HeaderName::from_bytes(name.as_bytes()).expect("a header name");
    let value = HeaderValue::from_str(value).expect("a header value");
    answer.headers_mut().insert(name, value);
}

pub(super) fn random_id(len: usize) -> String {
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
