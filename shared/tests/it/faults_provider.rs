//! Fault injection: the model provider fails, on command, under the real local server. The
//! stand-in OpenAI on loopback (`koe_testkit::openai`) is taken down (its port closed), drops
//! connections, answers after the time budget, answers 429 (rate limit, quota), 500, or garbage,
//! while `POST /api/chat`, round 1 and round 2 of `POST /agent` are called. Each fault is
//! checked on all three, and each is followed by a 200 once the fault is lifted (nothing stays
//! broken).
//!
//! Expected (SPEC, docs/behaviour.md, "Provider errors"): a 500 with the specific
//! code and the error body, one error notification each, within the provider budget
//! (`PROVIDER_TIMEOUT_MS`, 1 s here); connect errors, 5xx and rate-limit 429 are retried once;
//! a quota 429 is final; agent mode asks once more for an unusable output.

use std::time::{Duration, Instant};

use koe_testkit::faults;
use koe_testkit::harness::{TestApp, error_body, issued_step_id, send, spawn_app};
use koe_testkit::openai::Behaviour;
use serde_json::{Value, json};

const BUDGET_MS: u64 = 1000;
/// When the slow provider answers (a valid answer): waited for, it would be a 200, so the
/// budget's cut is the code `PROVIDER_TIMEOUT`, and "not before the budget" a lower bound.
const SLOW_ANSWER: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Chat,
    AgentRound1,
    AgentRound2,
}

const TARGETS: [Target; 3] = [Target::Chat, Target::AgentRound1, Target::AgentRound2];

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Chat => "chat",
            Target::AgentRound1 => "agent r1",
            Target::AgentRound2 => "agent r2",
        }
    }
}

/// What one call saw.
struct Seen {
    status: u16,
    code: Option<String>,
    provider_requests: usize,
    took: Duration,
}

async fn call(app: &TestApp, target: Target, n: usize) -> (reqwest::Response, Seen) {
    let before = app.openai.request_count();
    let started = Instant::now();
    let response = match target {
        Target::Chat => {
            app.post_chat(
                json!({"messages": [{"role": "user", "content": "こんにちは"}]}).to_string(),
            )
            .await
        }
        // A new device each time: the daily limit is not what is tested here.
        Target::AgentRound1 => {
            send(
                app.agent(http::Method::POST, "/agent").body(
                    json!({"message": "明日の予定は？", "capabilities": ["calendar"],
                       "deviceId": format!("provider-fault-{n}")})
                    .to_string(),
                ),
            )
            .await
        }
        // A fresh plan's step id each time, as round 1 issues it.
        Target::AgentRound2 => {
            let step_id = issued_step_id("provider-fault", app.clock.now());
            send(
                app.agent(http::Method::POST, "/agent").body(
                    json!({"message": "明日の予定は？", "deviceId": "provider-fault", "results": [
                    {"stepId": step_id, "tool": "calendar", "output": {"events": []}}]})
                    .to_string(),
                ),
            )
            .await
        }
    };
    let seen = Seen {
        status: response.status().as_u16(),
        code: None,
        provider_requests: app.openai.request_count() - before,
        took: started.elapsed(),
    };
    (response, seen)
}

/// Calls `target` and asserts a 500 `code` with the error body, one notification, and
/// `requests` provider requests; returns the observation.
async fn expect_failure(
    app: &TestApp,
    target: Target,
    n: usize,
    code: &str,
    requests: usize,
) -> Seen {
    let notifications = app.events.published().len();
    let (response, mut seen) = call(app, target, n).await;
    let body = error_body(response, 500, code).await;
    seen.code = body["code"].as_str().map(str::to_owned);
    let published = app.events.published();
    assert_eq!(
        published.len(),
        notifications + 1,
        "{}: one notification",
        target.name()
    );
    assert_eq!(published[notifications].code, code);
    assert_eq!(
        seen.provider_requests,
        requests,
        "{}: provider requests for {code}",
        target.name()
    );
    // How long it took is the table's figure, not asserted (a busy machine adds to it): a
    // failure that waited for the slow provider would be its valid answer, not `code`, and a
    // retry more is `requests`.
    seen
}

/// Asserts a 200 of the right shape from `target`.
async fn expect_ok(app: &TestApp, target: Target, n: usize) -> Seen {
    let (response, seen) = call(app, target, n).await;
    assert_eq!(seen.status, 200, "{}", target.name());
    let body: Value = response.json().await.unwrap();
    match target {
        Target::Chat => assert_eq!(body["message"]["role"], "assistant", "{body}"),
        Target::AgentRound1 => assert_eq!(body["type"], "plan", "{body}"),
        Target::AgentRound2 => assert_eq!(body["type"], "answer", "{body}"),
    }
    seen
}

fn describe(seen: &[(Target, Seen)]) -> String {
    seen.iter()
        .map(|(target, s)| {
            format!(
                "{} {} {} ({} req, {} ms)",
                target.name(),
                s.status,
                s.code.as_deref().unwrap_or(""),
                s.provider_requests,
                s.took.as_millis()
            )
            .replace("  ", " ")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

struct Fault {
    name: &'static str,
    expected: &'static str,
    /// The stand-in's answer to every request while the fault lasts.
    behaviour: Behaviour,
    code: &'static str,
    /// Provider requests per call: chat, agent round 1, agent round 2.
    requests: [usize; 3],
    targets: &'static [Target],
}

fn faults_by_answer() -> Vec<Fault> {
    vec![
        Fault {
            name: "Provider: drops the connection unanswered",
            // The request reached the provider, which may have acted on it: only connect
            // failures, 5xx and rate-limit 429s are retried.
            expected: "500 PROVIDER_ERROR at once, not retried (the request was delivered)",
            behaviour: Behaviour::Disconnect,
            code: "PROVIDER_ERROR",
            requests: [1, 1, 1],
            targets: &TARGETS,
        },
        Fault {
            name: "Provider: slow past the budget (answers after 5 s)",
            expected: "500 PROVIDER_TIMEOUT when the 1 s budget runs out, not later",
            behaviour: Behaviour::schema_valid().delayed(SLOW_ANSWER),
            code: "PROVIDER_TIMEOUT",
            requests: [1, 1, 1],
            targets: &TARGETS,
        },
        Fault {
            name: "Provider: 429 rate limit, every time",
            expected: "500 PROVIDER_ERROR after one retry with jitter",
            behaviour: Behaviour::rate_limited(),
            code: "PROVIDER_ERROR",
            requests: [2, 2, 2],
            targets: &TARGETS,
        },
        Fault {
            name: "Provider: 429 insufficient_quota",
            expected: "500 INSUFFICIENT_CREDITS, not retried",
            behaviour: Behaviour::insufficient_quota(),
            code: "INSUFFICIENT_CREDITS",
            requests: [1, 1, 1],
            targets: &TARGETS,
        },
        Fault {
            name: "Provider: 500, every time",
            expected: "500 PROVIDER_ERROR after one retry",
            behaviour: Behaviour::server_error(),
            code: "PROVIDER_ERROR",
            requests: [2, 2, 2],
            targets: &TARGETS,
        },
        Fault {
            name: "Provider: garbage (200 with an HTML body)",
            expected: "500 PROVIDER_BAD_RESPONSE (agent: asked once more first)",
            behaviour: Behaviour::garbage(),
            code: "PROVIDER_BAD_RESPONSE",
            requests: [1, 2, 2],
            targets: &TARGETS,
        },
        Fault {
            name: "Provider: completion that breaks the agent's schema",
            expected: "agent: asked once more, then 500 PROVIDER_BAD_RESPONSE",
            behaviour: Behaviour::complete(r#"{"decision": "not what was asked"}"#),
            code: "PROVIDER_BAD_RESPONSE",
            requests: [0, 2, 2],
            targets: &[Target::AgentRound1, Target::AgentRound2],
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_provider_fault_is_a_clear_500_and_passes() {
    let budget = BUDGET_MS.to_string();
    let app = spawn_app(&[("PROVIDER_TIMEOUT_MS", &budget)]).await;
    app.openai.set_default(Behaviour::schema_valid());
    let mut n = 0;
    let mut next = || {
        n += 1;
        n
    };

    for fault in faults_by_answer() {
        app.openai.set_default(fault.behaviour.clone());
        let mut seen = Vec::new();
        for target in fault.targets {
            let index = TARGETS.iter().position(|t| t == target).unwrap();
            let s = expect_failure(&app, *target, next(), fault.code, fault.requests[index]).await;
            if fault.code == "PROVIDER_TIMEOUT" {
                assert!(
                    s.took >= Duration::from_millis(BUDGET_MS - 100),
                    "{}: timed out after {:?}, before the budget",
                    target.name(),
                    s.took
                );
            }
            seen.push((*target, s));
        }
        // The fault lifted: the next calls succeed.
        app.openai.set_default(Behaviour::schema_valid());
        for target in TARGETS {
            expect_ok(&app, target, next()).await;
        }
        faults::record(
            fault.name,
            &format!("{}; 200 once it passes", fault.expected),
            &format!("{}; then 200 on all", describe(&seen)),
        );
    }

    // A single 429 is retried within the budget and answered.
    let mut seen = Vec::new();
    for target in TARGETS {
        app.openai.script([Behaviour::rate_limited()]);
        let s = expect_ok(&app, target, next()).await;
        assert_eq!(s.provider_requests, 2, "{}: one retry", target.name());
        seen.push((target, s));
    }
    faults::record(
        "Provider: one 429 rate limit, then fine",
        "retried once with jitter inside the budget: 200",
        &describe(&seen),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_goes_down_and_comes_back() {
    let budget = BUDGET_MS.to_string();
    let app = spawn_app(&[("PROVIDER_TIMEOUT_MS", &budget)]).await;
    app.openai.set_default(Behaviour::schema_valid());
    for (n, target) in TARGETS.into_iter().enumerate() {
        expect_ok(&app, target, n).await; // keep-alive connections are open now
    }

    app.openai.stop().await;
    // (The client's pool notices the closed connections a moment later, as it would a crash.)
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut seen = Vec::new();
    for (n, target) in TARGETS.into_iter().enumerate() {
        // Nothing reaches the provider: its port is closed.
        let s = expect_failure(&app, target, 10 + n, "PROVIDER_ERROR", 0).await;
        assert!(
            s.took >= Duration::from_millis(100),
            "{}: retried after a pause of 100 to 400 ms, answered in {:?}",
            target.name(),
            s.took
        );
        seen.push((target, s));
    }
    app.openai.restart().await.expect("the stand-in comes back");
    for (n, target) in TARGETS.into_iter().enumerate() {
        expect_ok(&app, target, 20 + n).await;
    }
    faults::record(
        "Provider: down (its port closed), then back",
        "500 PROVIDER_ERROR at once (connection refused, retried once); 200 once it is back",
        &format!("{}; then 200 on all", describe(&seen)),
    );
}
