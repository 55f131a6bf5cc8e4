//! Every route's `events/` fixture goes through the real Lambda adapter (lambda_http's API
//! Gateway v2 event type into its endpoint's `Service` and back), in-process, against a stand-in
//! OpenAI, and answers what its route says (`Route::fixture`: its status, the text its body
//! holds). The fixtures run in route-table order against one store, so the reservation fixtures
//! see the device the PUT /devices fixture registered.
//! (That each function has every port its endpoint needs is a compile-time fact: the ports are
//! typed fields built by `Ports::build`, and the bins name their endpoint.)

use std::sync::Arc;

use koe::app::Visit;
use koe::app::lambda::http::handle_event;
use koe::app::ports::Served;
use koe::platform::config::Vars;
use koe::platform::endpoint::Endpoint;
use koe_testkit::events::RecordingEventBus;
use koe_testkit::openai::{Behaviour, StandInOpenAi};
use koe_testkit::template::repo_root;

/// Collects each endpoint's check: its fixture through its service, built from one app (so the
/// reservation fixtures see the device the PUT /devices fixture registered).
struct Fixtures<'a> {
    app: &'a koe::App,
    openai: &'a StandInOpenAi,
    checks: Vec<std::pin::Pin<Box<dyn Future<Output = ()> + 'a>>>,
}

impl Visit for Fixtures<'_> {
    fn visit<E: Served>(&mut self) {
        let (app, openai) = (self.app, self.openai);
        self.checks.push(Box::pin(async move {
            let service = app.service::<E>().await.unwrap();
            check_fixture(&service, openai).await;
        }));
    }
}

#[tokio::test]
async fn every_fixture_passes_through_the_lambda_adapter() {
    let openai = StandInOpenAi::start().await;
    openai.set_default(Behaviour::complete(koe_testkit::fixtures::REPLY));
    let base_url = openai.base_url();
    let vars = Vars::from_pairs(&[
        ("OPENAI_BASE_URL", &base_url),
        ("OPENAI_API_KEY", "sk-test"),
        ("AGENT_API_KEYS", "example-agent-key"),
        (
            "AGENT_STEP_KEY",
            "example-step-key-for-local-invocation-0123",
        ),
    ]);
    let events = Arc::new(RecordingEventBus::default());
    // The real clock: the create-call event comes from the generator, valid today.
    let app = koe::App::local(vars).with_events(events.clone());
    let mut fixtures = Fixtures {
        app: &app,
        openai: &openai,
        checks: Vec::new(),
    };
    koe::app::each(&mut fixtures);
    assert_eq!(fixtures.checks.len(), koe::ROUTES.len());
    for check in fixtures.checks {
        check.await;
    }

    let chat_request = &openai.received()[0].body;
    assert_eq!(chat_request["messages"][0]["content"], "こんにちは");
    let published = events.published();
    assert_eq!(published.len(), 1, "only /api/error notifies");
    assert_eq!(published[0].code, "TEST_ERROR");
}

async fn check_fixture<E: Endpoint>(service: &koe::app::edge::Service<E>, openai: &StandInOpenAi) {
    let route = service.route();
    {
        // The committed create goes stale with the date: the generator's event, valid today.
        let text = if route.binary == "create-call" {
            koe_testkit::fixtures::create_call(chrono::Utc::now()).to_string()
        } else {
            std::fs::read_to_string(repo_root().join(route.fixture_file())).unwrap()
        };
        let event = lambda_http::request::from_str(&text)
            .unwrap_or_else(|e| panic!("events/{}.json: {e}", route.binary));
        assert_eq!(event.method(), route.method, "{}", route.binary);
        assert_eq!(event.uri().path(), route.path, "{}", route.binary);

        // The planner plans one calendar step for "tomorrow" (what `Route::fixture` documents).
        if route.binary == "agent" {
            openai.script([Behaviour::complete(
                r#"{"decision":{"type":"plan","steps":[{"tool":"calendar","args":{"from":"2027-01-02T00:00:00+09:00","to":"2027-01-03T00:00:00+09:00"}}]}}"#,
            )]);
        }
        let response = handle_event(service, event).await;
        let (status, needle) = (route.fixture.status, route.fixture.holds);
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
}
