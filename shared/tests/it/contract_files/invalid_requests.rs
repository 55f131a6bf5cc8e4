//! Each operation's 400s, driven: bad requests of each kind sent to the local server, and every
//! `INVALID_REQUEST` it answers is of a message (as `error_messages` reads them off the sources)
//! that has an example under that operation's 400 in `openapi.yaml`, not only under another's.

use koe::platform::error::ErrorCode;
use koe_testkit::harness::{TestApp, send, spawn_app};
use koe_testkit::template::load_yaml;

use super::error_messages::{answered, examples};

/// A device id and a VoIP token the parsers accept.
const DEVICE: &str = "device-400";
const TOKEN: &str = "abcdef0123abcdef0123abcdef0123abcdef0123abcdef0123abcdef0123abcd";

/// (method, path as openapi.yaml names it, the request's path and query, body, headers).
type Case = (
    http::Method,
    &'static str,
    String,
    String,
    Vec<(&'static str, String)>,
);

fn cases() -> Vec<Case> {
    use http::Method;
    let mut cases: Vec<Case> = Vec::new();
    let mut add = |method: &Method, path: &'static str, body: &str| {
        cases.push((
            method.clone(),
            path,
            path.to_owned(),
            body.to_owned(),
            Vec::new(),
        ));
    };
    for body in [
        "",
        "[]",
        "{\"messages\":",
        r#"{"messages":"hi"}"#,
        r#"{"messages":[]}"#,
        r#"{"messages":[1]}"#,
        r#"{"messages":[{"content":"hi"}]}"#,
        r#"{"messages":[{"role":"robot","content":"hi"}]}"#,
        r#"{"messages":[{"role":"user","content":"hi"}],"model":5}"#,
        r#"{"messages":[{"role":"user","content":"hi"}],"model":"gpt-2"}"#,
        r#"{"messages":[{"role":"user","content":"hi"}],"maxTokens":0}"#,
    ] {
        add(&Method::POST, "/api/chat", body);
    }
    // Content over the chat's total: 9 messages of 16 000 characters.
    let message = format!(r#"{{"role":"user","content":"{}"}}"#, "a".repeat(16_000));
    let messages = vec![message; 9].join(",");
    add(
        &Method::POST,
        "/api/chat",
        &format!(r#"{{"messages":[{messages}]}}"#),
    );
    // A tool's output over its list's items.
    let events = vec!["{}"; 201].join(",");
    add(
        &Method::POST,
        "/agent",
        &format!(
            r#"{{"deviceId":"device-400","message":"hi","results":[{{"stepId":"s1","tool":"calendar","output":{{"events":[{events}]}}}}]}}"#
        ),
    );
    for body in [
        "",
        "[]",
        r#"{"message":"hi"}"#,
        r#"{"deviceId":"device-400","message":""}"#,
        r#"{"deviceId":"device-400","message":"hi","timezone":"Mars/Base"}"#,
        r#"{"deviceId":"device-400","message":"hi","capabilities":[1]}"#,
        r#"{"deviceId":"device 400","message":"hi"}"#,
        r#"{"deviceId":"device-400","message":"hi","results":[1,2,3,4,5,6]}"#,
        r#"{"deviceId":"device-400","message":"hi","results":[]}"#,
        r#"{"deviceId":"device-400","message":"hi","results":[{"stepId":"s","tool":"x","output":{}}]}"#,
        r#"{"deviceId":"device-400","message":"hi","capabilities":["calendar"],"timezone":"Mars/Base"}"#,
        r#"{"deviceId":"device-400","message":"hi","results":[{"stepId":"s1","tool":"calendar","output":{"events":[]}}]}"#,
        r#"{"deviceId":"device-400","message":"hi","results":[{"stepId":"s1","tool":"calendar","output":{"events":[{"title":"t","start":"x","end":"y","allDay":false}]}}]}"#,
    ] {
        add(&Method::POST, "/agent", body);
    }
    for body in [
        "",
        "[]",
        &format!(r#"{{"deviceId":"{DEVICE}"}}"#),
        &format!(r#"{{"deviceId":"{DEVICE}","voipToken":"xyz"}}"#),
        &format!(r#"{{"deviceId":"{DEVICE}","voipToken":"{TOKEN}","environment":"beta"}}"#),
        &format!(r#"{{"deviceId":"{DEVICE}","voipToken":"{TOKEN}","confirmsCalls":"yes"}}"#),
        &format!(r#"{{"deviceId":"{}"}}"#, "a".repeat(9000)),
    ] {
        add(&Method::PUT, "/devices", body);
    }
    for body in [
        "{",
        r#"{"deviceId":"device-400"}"#,
        r#"{"deviceId":"device-400","scheduledAt":"tomorrow","callerName":"Mum"}"#,
        r#"{"deviceId":"device-400","scheduledAt":"2020-01-01T07:00:00+09:00","callerName":"Mum"}"#,
        r#"{"deviceId":"device-400","scheduledAt":"2099-01-01T07:00:00+09:00","callerName":""}"#,
    ] {
        add(&Method::POST, "/calls", body);
    }
    for body in [
        r#"{"deviceId":"device-400"}"#,
        r#"{"deviceId":"device-400","callId":"nope"}"#,
    ] {
        add(&Method::POST, "/calls/confirm", body);
    }
    for query in ["", "?deviceId=", "?deviceId=a%20b"] {
        for method in [Method::GET, Method::DELETE] {
            cases.push((
                method,
                "/calls",
                format!("/calls{query}"),
                String::new(),
                Vec::new(),
            ));
        }
    }
    // A reservation the body's checks accept: a day ahead.
    let tomorrow = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    let call =
        format!(r#"{{"deviceId":"{DEVICE}","scheduledAt":"{tomorrow}","callerName":"Mum"}}"#);
    cases.push((
        Method::POST,
        "/calls",
        "/calls".into(),
        call.clone(),
        vec![("idempotency-key", "k".repeat(256))],
    ));
    cases.push((
        Method::POST,
        "/calls",
        "/calls".into(),
        call,
        vec![("x-device-secret", "s".repeat(129))],
    ));
    cases
}

async fn answer(app: &TestApp, case: &Case) -> reqwest::Response {
    let (method, openapi_path, path, body, headers) = case;
    if *openapi_path == "/api/chat" {
        return app.post_chat(body.clone()).await;
    }
    let mut request = app.agent(method.clone(), path).body(body.clone());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    send(request).await
}

#[tokio::test]
async fn every_400_an_operation_answers_is_of_a_message_with_an_example_under_it() {
    let messages = answered().unwrap_or_else(|unread| panic!("unread: {unread:?}"));
    let examples = examples(&load_yaml("openapi.yaml"));
    let app = spawn_app(&[]).await;
    let mut undocumented = Vec::new();
    let mut answered_templates = std::collections::BTreeSet::new();
    for case in cases() {
        let response = answer(&app, &case).await;
        let (method, openapi_path, path, body, _) = &case;
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        assert_eq!(status, 400, "{method} {path} {body:?}: {text}");
        let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            answer["code"], "INVALID_REQUEST",
            "{method} {path} {body:?}"
        );
        let message = answer["message"].as_str().unwrap();
        let operation = format!("{} {openapi_path} 400", method.as_str().to_lowercase());
        let of: Vec<_> = messages
            .iter()
            .filter(|m| m.code == ErrorCode::InvalidRequest && m.matches(message))
            .collect();
        assert!(
            !of.is_empty(),
            "{operation}: {message:?} is of no message read"
        );
        let documented = of.iter().any(|m| {
            examples.iter().any(|(_, code, text, at)| {
                *at == operation && code == "INVALID_REQUEST" && m.matches(text)
            })
        });
        if !documented {
            undocumented.push(format!("{operation}: {message:?} ({body})"));
        }
        answered_templates.extend(of.iter().map(|m| m.at.clone()));
    }
    assert!(
        undocumented.is_empty(),
        "400s answered with no example of their message under the operation: {undocumented:#?}"
    );
    // The drive reached 36 of the 40 messages read (not: a body broken off, and round 2's
    // refusals of a step id signed by round 1: expired, of another plan, a plan answered).
    assert!(answered_templates.len() >= 36, "{answered_templates:?}");
}
