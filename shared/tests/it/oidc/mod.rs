//! POST /internal/dispatch over HTTP against the real local server, with a stand-in OIDC issuer
//! (`koe_testkit::oidc`, TEST-ONLY keys): every forged, misdirected or malformed token is 401
//! with the error body and starts nothing; a valid one is 202 and hands one run on. The JWKS is
//! fetched once, trusted for its max-age (at most six hours), refetched for an unknown `kid` at
//! most once a minute, never through a redirect, and a slow refetch holds up no token whose key is
//! already known; while it cannot be fetched every caller is 401 and no notification is raised.

mod jwks;
mod tokens;

use std::sync::Arc;

use koe_testkit::clock::ManualClock;
use koe_testkit::dispatching::CountingTrigger;
use koe_testkit::harness::{TestApp, error_body, spawn_app_with};
use koe_testkit::oidc::{KID_1, StandInIssuer, TestKey, claims_with, mint, valid_token};

pub(super) struct Setup {
    app: TestApp,
    issuer: StandInIssuer,
    clock: Arc<ManualClock>,
    runs: Arc<CountingTrigger>,
}

pub(super) async fn setup() -> Setup {
    let issuer = StandInIssuer::start().await;
    setup_with(issuer, true).await
}

pub(super) async fn setup_with(issuer: StandInIssuer, trust_issuer: bool) -> Setup {
    let clock = Arc::new(ManualClock::at(chrono::Utc::now()));
    let runs = Arc::new(CountingTrigger::default());
    let vars = if trust_issuer {
        issuer.vars()
    } else {
        Vec::new()
    };
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (c, r) = (clock.clone(), runs.clone());
    let app = spawn_app_with(&vars, move |app| app.with_clock(c).with_dispatch_trigger(r)).await;
    Setup {
        app,
        issuer,
        clock,
        runs,
    }
}

impl Setup {
    async fn post(&self, authorization: Option<&str>) -> reqwest::Response {
        let mut request = self
            .app
            .agent_unauthenticated(http::Method::POST, "/internal/dispatch");
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        request.send().await.expect("koe-local answers")
    }

    async fn post_token(&self, token: &str) -> reqwest::Response {
        self.post(Some(&format!("Bearer {token}"))).await
    }

    async fn assert_refused(&self, response: reqwest::Response, case: &str) {
        let runs = self.runs.count();
        assert_eq!(response.status().as_u16(), 401, "{case}");
        error_body(response, 401, "UNAUTHORIZED").await;
        assert_eq!(self.runs.count(), runs, "{case}: no run requested");
    }

    async fn assert_accepted(&self, response: reqwest::Response, case: &str) {
        assert_eq!(response.status().as_u16(), 202, "{case}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["status"], "accepted", "{case}");
    }

    /// A valid token (key one) is accepted now: `case` says when.
    async fn accepts_a_valid_token(&self, case: &str) {
        let response = self.post_token(&valid_token()).await;
        self.assert_accepted(response, case).await;
    }

    /// A valid token (key one) is refused now: `case` says why.
    async fn refuses_a_valid_token(&self, case: &str) {
        let response = self.post_token(&valid_token()).await;
        self.assert_refused(response, case).await;
    }
}

/// `Bearer` and a token signed with key one whose claims are the valid ones with `changes`.
pub(super) fn signed_by_key_one(changes: serde_json::Value) -> Option<String> {
    bearer(&mint(&claims_with(changes), TestKey::One, Some(KID_1)))
}

pub(super) fn bearer(token: &str) -> Option<String> {
    Some(format!("Bearer {token}"))
}
