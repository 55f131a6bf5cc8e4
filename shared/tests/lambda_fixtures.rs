//! Every `events/` fixture goes through the real Lambda adapter (lambda_http's API Gateway v2
//! event type into `App::handle` and back), in-process, against a stand-in OpenAI.

use std::sync::Arc;

use koe::config::{Config, Vars};
use koe::entrypoints::lambda::{handle_event, handle_event_with};
use koe::routes::{Endpoint, ROUTES};
use koe_testkit::clock::ManualClock;
use koe_testkit::events::RecordingEventBus;
use koe_testkit::openai::{Behaviour, StandInOpenAi};
use koe_testkit::template::repo_root;

/// What each fixture must produce. The fixtures run in route-table order against one store, so
/// the reservation fixtures see the device the PUT /devices fixture registered.
fn expected(endpoint: Endpoint) -> (u16, &'static str) {
    match endpoint {
        Endpoint::Health => (200, r#""status":"ok""#),
        Endpoint::Info => (200, r#""minimumVersion":"1.0.0""#),
        Endpoint::Chat => (200, r#""content":"フィクスチャの返事""#),
        Endpoint::ErrorTest => (500, r#""code":"TEST_ERROR""#),
        // The planner (scripted below) plans one calendar step for "tomorrow".
        Endpoint::Agent => (
            200,
            r#""steps":[{"id":"s1","tool":"calendar","args":{"from":"2027-01-02T00:00:00+09:00","to":"2027-01-03T00:00:00+09:00"}}]"#,
        ),
        Endpoint::PutDevice => (200, r#""environment":"sandbox""#),
        Endpoint::CreateCall => (201, r#""scheduledAt":"2027-01-01T07:00:00+09:00""#),
        Endpoint::GetCall => (200, r#""callerName":"こえ""#),
        Endpoint::CancelCall => (204, ""),
        // The fixture's Bearer token is a placeholder that no issuer signed (and this app trusts
        // no issuer): the honest answer is 401. `dispatch_lambda.rs` covers the accepted path.
        Endpoint::Dispatch => (401, r#""code":"UNAUTHORIZED""#),
    }
}

#[tokio::test]
async fn every_fixture_passes_through_the_lambda_adapter() {
    let openai = StandInOpenAi::start().await;
    openai.set_default(Behaviour::complete("フィクスチャの返事"));
    let base_url = openai.base_url();
    let config = Config::from_vars(&Vars::from_pairs(&[
        ("OPENAI_BASE_URL", &base_url),
        ("OPENAI_API_KEY", "sk-test"),
        ("AGENT_API_KEYS", "example-agent-key"),
    ]))
    .unwrap();
    let events = Arc::new(RecordingEventBus::default());
    // The create-call fixture reserves 2027-01-01T07:00:00+09:00: "now" is that morning.
    let clock = Arc::new(ManualClock::at_rfc3339("2027-01-01T06:00:00+09:00"));
    let app = koe::App::from_config(config)
        .await
        .with_events(events.clone())
        .with_clock(clock);

    for route in ROUTES {
        let text =
            std::fs::read_to_string(repo_root().join(format!("events/{}.json", route.binary)))
                .unwrap();
        let event = lambda_http::request::from_str(&text)
            .unwrap_or_else(|e| panic!("events/{}.json: {e}", route.binary));
        assert_eq!(event.method(), route.method, "{}", route.binary);
        assert_eq!(event.uri().path(), route.path, "{}", route.binary);

        if route.endpoint == Endpoint::Agent {
            openai.script([Behaviour::complete(
                r#"{"decision":{"type":"plan","steps":[{"tool":"calendar","args":{"from":"2027-01-02T00:00:00+09:00","to":"2027-01-03T00:00:00+09:00"}}]}}"#,
            )]);
        }
        let response = handle_event(&app, route.endpoint, event).await;
        let (status, needle) = expected(route.endpoint);
        assert_eq!(response.status().as_u16(), status, "{}", route.binary);
        match response.body() {
            lambda_http::Body::Text(body) => {
                assert_eq!(
                    response
                        .headers()
                        .get("content-type")
                        .map(|v| v.to_str().unwrap()),
                    Some("application/json"),
                    "{}",
                    route.binary
                );
                assert!(
                    !needle.is_empty() && body.contains(needle),
                    "{}: {body}",
                    route.binary
                );
            }
            lambda_http::Body::Empty => assert!(needle.is_empty(), "{}: empty body", route.binary),
            other => panic!(
                "{}: JSON answers are text bodies, got {other:?}",
                route.binary
            ),
        }
    }

    let chat_request = &openai.received()[0].body;
    assert_eq!(chat_request["messages"][0]["content"], "こんにちは");
    let published = events.published();
    assert_eq!(published.len(), 1, "only /api/error notifies");
    assert_eq!(published[0].code, "TEST_ERROR");
}

/// The constructor of `koe::wiring` that each function's binary calls (checked against the
/// binaries' source in `contract_files.rs`).
async fn wired(endpoint: Endpoint, config: Config) -> koe::wiring::Function {
    use koe::wiring;
    match endpoint {
        Endpoint::Health => wiring::health(config).await,
        Endpoint::Info => wiring::info(config).await,
        Endpoint::Chat => wiring::chat(config).await,
        Endpoint::ErrorTest => wiring::error_test(config).await,
        Endpoint::Agent => wiring::agent(config).await,
        Endpoint::PutDevice => wiring::put_device(config).await,
        Endpoint::CreateCall => wiring::create_call(config).await,
        Endpoint::GetCall => wiring::get_call(config).await,
        Endpoint::CancelCall => wiring::cancel_call(config).await,
        Endpoint::Dispatch => wiring::dispatch(config).await,
    }
}

/// Each function builds only its own adapters and names its own handler; this holds each to
/// having every one its endpoint needs: its fixture, through the app and handler its binary
/// builds (on the memory store, each
/// function with a store of its own), never meets a stand-in port (no model: 500
/// PROVIDER_NOT_CONFIGURED; no store: 503).
#[tokio::test]
async fn every_fixture_passes_through_its_own_functions_wiring() {
    let openai = StandInOpenAi::start().await;
    openai.set_default(Behaviour::complete(
        r#"{"decision":{"type":"answer","reply":"はい。","emotion":"happy"}}"#,
    ));
    let base_url = openai.base_url();
    let vars = [
        ("OPENAI_BASE_URL", base_url.as_str()),
        ("OPENAI_API_KEY", "sk-test"),
        ("AGENT_API_KEYS", "example-agent-key"),
    ];
    for route in ROUTES {
        let config = Config::from_vars(&Vars::from_pairs(&vars)).unwrap();
        let clock = Arc::new(ManualClock::at_rfc3339("2027-01-01T06:00:00+09:00"));
        let function = wired(route.endpoint, config).await;
        assert_eq!(function.endpoint, route.endpoint, "{}", route.binary);
        let app = function.app.with_clock(clock);
        let text =
            std::fs::read_to_string(repo_root().join(format!("events/{}.json", route.binary)))
                .unwrap();
        let event = lambda_http::request::from_str(&text).unwrap();
        let response = handle_event_with(&app, route.endpoint, function.handler, event).await;
        let status = response.status().as_u16();
        let body = match response.body() {
            lambda_http::Body::Text(body) => body.clone(),
            _ => String::new(),
        };
        // On a store of its own, each reservation fixture finds no device or reservation.
        let expected = match route.endpoint {
            Endpoint::ErrorTest => 500,
            Endpoint::CreateCall => 409,
            Endpoint::GetCall | Endpoint::CancelCall => 404,
            Endpoint::Dispatch => 401,
            _ => 200,
        };
        assert_eq!(status, expected, "{}: {body}", route.binary);
        assert!(
            !body.contains("PROVIDER_NOT_CONFIGURED") && !body.contains("SERVICE_UNAVAILABLE"),
            "{}: {body}",
            route.binary
        );
    }
}
