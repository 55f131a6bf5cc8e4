//! Every `events/` fixture goes through the real Lambda adapter (lambda_http's API Gateway v2
//! event type into `App::handle` and back), in-process, against a stand-in OpenAI.

use std::sync::Arc;

use koe::config::{Config, Vars};
use koe::entrypoints::lambda::handle_event;
use koe::routes::{Endpoint, ROUTES};
use koe_testkit::events::RecordingEventBus;
use koe_testkit::openai::{Behaviour, StandInOpenAi};
use koe_testkit::template::repo_root;

fn expected(endpoint: Endpoint) -> (u16, &'static str) {
    match endpoint {
        Endpoint::Health => (200, r#""status":"ok""#),
        Endpoint::Info => (200, r#""minimumVersion":"1.0.0""#),
        Endpoint::Chat => (200, r#""content":"フィクスチャの返事""#),
        Endpoint::ErrorTest => (500, r#""code":"TEST_ERROR""#),
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
    ]))
    .unwrap();
    let events = Arc::new(RecordingEventBus::default());
    let app = koe::App::from_config(config).with_events(events.clone());

    for route in ROUTES {
        let text =
            std::fs::read_to_string(repo_root().join(format!("events/{}.json", route.binary)))
                .unwrap();
        let event = lambda_http::request::from_str(&text)
            .unwrap_or_else(|e| panic!("events/{}.json: {e}", route.binary));
        assert_eq!(event.method(), route.method, "{}", route.binary);
        assert_eq!(event.uri().path(), route.path, "{}", route.binary);

        let response = handle_event(&app, route.endpoint, event).await;
        let (status, needle) = expected(route.endpoint);
        assert_eq!(response.status().as_u16(), status, "{}", route.binary);
        assert_eq!(response.headers()["content-type"], "application/json");
        let body = match response.body() {
            lambda_http::Body::Text(text) => text.clone(),
            other => panic!("{}: JSON answers are text bodies, got {other:?}", route.binary),
        };
        assert!(body.contains(needle), "{}: {body}", route.binary);
    }

    let chat_request = &openai.received()[0].body;
    assert_eq!(chat_request["messages"][0]["content"], "こんにちは");
    let published = events.published();
    assert_eq!(published.len(), 1, "only /api/error notifies");
    assert_eq!(published[0].code, "TEST_ERROR");
}
