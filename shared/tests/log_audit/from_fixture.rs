//! The scenario of a route that has none of its own: its committed `events/` fixture, as it is
//! and with every string it carries (query values, body strings) made a sentinel.

use koe::platform::endpoint::{Api, Route};
use koe_testkit::fixtures::committed;
use koe_testkit::harness::send;
use serde_json::Value;

use crate::pass::Pass;
use crate::sentinels::*;

/// Sends `route`'s fixture, then the same request with its strings replaced by sentinels (a
/// refusal that repeats its input back is audited too). Either answers; only a store that is
/// down, or a route whose fixture answers a 5xx (`GET /api/error`), may make it a 5xx.
pub(super) async fn from_fixture(pass: &Pass, route: &Route) {
    let event = committed(route.binary); // (its `Route::fixture_file`)
    let query = event["rawQueryString"].as_str().unwrap_or_default();
    let body = event["body"].as_str().unwrap_or_default();
    for (what, query, body) in [
        ("as committed", query.to_owned(), body.to_owned()),
        ("with sentinels", sentinel_query(query), sentinel_body(body)),
    ] {
        let path = match query.as_str() {
            "" => route.path.to_owned(),
            query => format!("{}?{query}", route.path),
        };
        let request = match route.api {
            Api::Chat => pass
                .app
                .client
                .request(route.method.clone(), format!("{}{path}", pass.app.chat_url)),
            Api::Agent => pass.agent(route.method.clone(), &path),
        };
        let status = send(request.body(body)).await.status();
        assert!(
            status.as_u16() < 500 || pass.down || status.as_u16() == route.fixture.status,
            "{} pass: {} {} {what}: {status}",
            pass.name,
            route.method,
            route.path
        );
    }
}

/// `query` with every value the chat-text sentinel.
fn sentinel_query(query: &str) -> String {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) => format!("{name}={CHAT_TEXT}"),
            None => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// `body` (JSON) with every string the chat-text sentinel; empty if it is not JSON.
fn sentinel_body(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .map(|mut json| {
            make_sentinels(&mut json);
            json.to_string()
        })
        .unwrap_or_default()
}

/// Every string of `json` made the chat-text sentinel.
fn make_sentinels(json: &mut Value) {
    match json {
        Value::String(s) => *s = CHAT_TEXT.to_owned(),
        Value::Array(items) => items.iter_mut().for_each(make_sentinels),
        Value::Object(fields) => fields.values_mut().for_each(make_sentinels),
        _ => {}
    }
}

#[test]
fn every_string_a_fixture_carries_becomes_the_sentinel() {
    assert_eq!(
        sentinel_query("deviceId=device-1&flag"),
        format!("deviceId={CHAT_TEXT}&flag")
    );
    assert_eq!(sentinel_query(""), "");
    let body = sentinel_body(r#"{"deviceId":"d","n":3,"list":["a",{"b":"c"}],"ok":true}"#);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        serde_json::json!({"deviceId": CHAT_TEXT, "n": 3, "list": [CHAT_TEXT, {"b": CHAT_TEXT}], "ok": true})
    );
    assert_eq!(sentinel_body("not json"), "");
}
