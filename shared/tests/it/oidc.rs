//! POST /internal/dispatch over HTTP against the real local server, with a stand-in OIDC issuer
//! (`koe_testkit::oidc`, TEST-ONLY keys): every forged, misdirected or malformed token is 401
//! with the error body and starts nothing; a valid one is 202 and hands one run on. The JWKS is
//! fetched once, trusted for its max-age (at most six hours), refetched for an unknown `kid` at
//! most once a minute, never through a redirect, and a slow refetch holds up no token whose key is
//! already known; while it cannot be fetched every caller is 401 and no notification is raised.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration as StdDuration, Instant};

use async_trait::async_trait;
use chrono::Duration;
use koe::dispatch::trigger::{DispatchTrigger, TriggerError};
use koe_testkit::clock::ManualClock;
use koe_testkit::harness::{TEST_API_KEY, TestApp, error_body, spawn_app_with};
use koe_testkit::oidc::{
    self, KID_1, KID_2, StandInIssuer, TestKey, claims_with, mint, valid_claims, valid_token,
};
use serde_json::json;

#[derive(Default)]
struct CountingTrigger(AtomicUsize);

impl CountingTrigger {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl DispatchTrigger for CountingTrigger {
    async fn request_run(&self) -> Result<(), TriggerError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

struct Setup {
    app: TestApp,
    issuer: StandInIssuer,
    clock: Arc<ManualClock>,
    runs: Arc<CountingTrigger>,
}

async fn setup() -> Setup {
    let issuer = StandInIssuer::start().await;
    setup_with(issuer, true).await
}

async fn setup_with(issuer: StandInIssuer, trust_issuer: bool) -> Setup {
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
fn signed_by_key_one(changes: serde_json::Value) -> Option<String> {
    bearer(&mint(&claims_with(changes), TestKey::One, Some(KID_1)))
}

#[tokio::test]
async fn a_valid_token_is_accepted_and_requests_one_run() {
    let s = setup().await;
    s.accepts_a_valid_token("valid token").await;
    assert_eq!(s.runs.count(), 1);
    // No X-Api-Key needed, and the scheme's case does not matter.
    s.assert_accepted(
        s.post(Some(&format!("bearer {}", valid_token()))).await,
        "lower-case scheme",
    )
    .await;
    assert_eq!(s.runs.count(), 2);
    assert_eq!(s.issuer.fetches(), 1, "the JWKS is fetched once and cached");
}

#[tokio::test]
async fn every_attack_is_401() {
    let s = setup().await;
    let now = chrono::Utc::now().timestamp();
    let valid = valid_token();
    let cases: Vec<(&str, Option<String>)> = vec![
        ("missing Authorization", None),
        (
            "non-Bearer (Basic)",
            Some("Basic ZGlzcGF0Y2g6c2VjcmV0".into()),
        ),
        ("the token without a scheme", Some(valid.clone())),
        (
            "an X-Api-Key-like value",
            Some(format!("ApiKey {TEST_API_KEY}")),
        ),
        ("not a JWT", Some("Bearer not.a.jwt".into())),
        (
            "wrong aud",
            signed_by_key_one(json!({"aud": "https://elsewhere.test"})),
        ),
        (
            "wrong iss",
            signed_by_key_one(json!({"iss": "https://evil.test"})),
        ),
        (
            "wrong email",
            signed_by_key_one(json!({"email": "someone@koe-test.iam.gserviceaccount.com"})),
        ),
        (
            "email_verified false",
            signed_by_key_one(json!({"email_verified": false})),
        ),
        (
            "email_verified missing",
            signed_by_key_one(json!({"email_verified": null})),
        ),
        ("email missing", signed_by_key_one(json!({"email": null}))),
        (
            "expired",
            signed_by_key_one(json!({"exp": now - 3600, "iat": now - 7200})),
        ),
        ("no exp", signed_by_key_one(json!({"exp": null}))),
        ("no aud", signed_by_key_one(json!({"aud": null}))),
        (
            "not valid yet",
            signed_by_key_one(json!({"nbf": now + 3600})),
        ),
        ("alg none", bearer(&oidc::alg_none_token(&valid_claims()))),
        (
            "HS256 signed with the public key",
            bearer(&oidc::hs256_with_public_key(&valid_claims())),
        ),
        (
            "signed by another key under the known kid",
            bearer(&mint(&valid_claims(), TestKey::Two, Some(KID_1))),
        ),
        (
            "unknown kid",
            bearer(&mint(&valid_claims(), TestKey::One, Some("no-such-kid"))),
        ),
        ("no kid", bearer(&mint(&valid_claims(), TestKey::One, None))),
        (
            "tampered payload (other email)",
            bearer(&oidc::tampered(
                &valid,
                &claims_with(json!({"email": "attacker@evil.test"})),
            )),
        ),
        (
            "tampered payload (later exp)",
            bearer(&oidc::tampered(
                &valid,
                &claims_with(json!({"exp": now + 86_400})),
            )),
        ),
        (
            "signature stripped",
            bearer(&format!("{}.", valid.rsplit_once('.').unwrap().0)),
        ),
    ];
    for (case, authorization) in cases {
        let response = s.post(authorization.as_deref()).await;
        s.assert_refused(response, case).await;
    }
    // A valid X-Api-Key opens nothing here.
    let response = s
        .app
        .agent(http::Method::POST, "/internal/dispatch")
        .send()
        .await
        .unwrap();
    s.assert_refused(response, "X-Api-Key instead of a token")
        .await;
    // After all that, a valid token still works: nothing was poisoned.
    s.assert_accepted(s.post_token(&valid).await, "valid token afterwards")
        .await;
    assert_eq!(s.runs.count(), 1);
}

fn bearer(token: &str) -> Option<String> {
    Some(format!("Bearer {token}"))
}

#[tokio::test]
async fn an_unknown_kid_refetches_the_jwks_at_most_once_a_minute() {
    let s = setup().await;
    s.accepts_a_valid_token("valid").await;
    assert_eq!(s.issuer.fetches(), 1);

    // Made-up kids: the JWKS was fetched less than a minute ago, so no fetch.
    for i in 0..5 {
        let token = mint(&valid_claims(), TestKey::One, Some(&format!("made-up-{i}")));
        s.assert_refused(s.post_token(&token).await, "made-up kid")
            .await;
    }
    assert_eq!(s.issuer.fetches(), 1, "no refetch within the minute");

    // The issuer rotates to key two. Within the minute its tokens are refused...
    s.issuer.serve_keys(&[TestKey::Two]);
    let rotated = mint(&valid_claims(), TestKey::Two, Some(KID_2));
    s.assert_refused(s.post_token(&rotated).await, "rotated key, same minute")
        .await;
    assert_eq!(s.issuer.fetches(), 1);
    // ...a minute later the unknown kid triggers one refetch, which finds the new key.
    s.clock.advance(Duration::seconds(61));
    s.assert_accepted(s.post_token(&rotated).await, "rotated key, next minute")
        .await;
    assert_eq!(s.issuer.fetches(), 2);
    // Key one is gone from the JWKS now; again at most one fetch a minute.
    s.refuses_a_valid_token("retired key").await;
    s.refuses_a_valid_token("retired key again").await;
    assert_eq!(s.issuer.fetches(), 2);
    s.clock.advance(Duration::seconds(61));
    s.refuses_a_valid_token("retired key, next minute").await;
    assert_eq!(s.issuer.fetches(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_refetch_holds_up_no_known_kid_and_runs_once_for_the_unknown_ones() {
    let s = setup().await;
    s.accepts_a_valid_token("first").await;
    assert_eq!(s.issuer.fetches(), 1);
    // The issuer rotates in key two and answers slowly (under the 3 s fetch timeout); a minute
    // later a key-two token triggers the refetch.
    const SLOW: StdDuration = StdDuration::from_millis(2000);
    s.issuer.serve_keys(&[TestKey::One, TestKey::Two]);
    s.issuer.set_delay(SLOW);
    s.clock.advance(Duration::seconds(61));
    let rotated = mint(&valid_claims(), TestKey::Two, Some(KID_2));
    let refetch_in_flight = || async {
        let deadline = Instant::now() + StdDuration::from_secs(5);
        while s.issuer.fetches() < 2 {
            assert!(Instant::now() < deadline, "the refetch starts");
            tokio::time::sleep(StdDuration::from_millis(5)).await;
        }
        Instant::now()
    };
    let (triggering, waiting, known, made_up) = tokio::join!(
        s.post_token(&rotated),
        // Unknown kids while the refetch is in flight: they wait for it and are judged after it.
        async {
            refetch_in_flight().await;
            s.post_token(&rotated).await
        },
        // A known kid meanwhile: answered from the keys at hand, at once.
        async {
            let started = refetch_in_flight().await;
            let response = s.post_token(&valid_token()).await;
            (response, started.elapsed())
        },
        async {
            refetch_in_flight().await;
            let token = mint(&valid_claims(), TestKey::One, Some("made-up"));
            s.post_token(&token).await
        },
    );
    let (known, took) = known;
    s.assert_accepted(known, "known kid during the refetch")
        .await;
    assert!(
        took < SLOW / 4,
        "a known kid waited {took:?} for a refetch of {SLOW:?}"
    );
    s.assert_accepted(triggering, "the kid that triggered the refetch")
        .await;
    s.assert_accepted(waiting, "an unknown kid that waited for the refetch")
        .await;
    s.assert_refused(made_up, "a made-up kid, judged after the refetch")
        .await;
    assert_eq!(s.issuer.fetches(), 2, "one refetch for all of them");
}

#[tokio::test]
async fn an_unreachable_jwks_is_401_without_a_notification_and_recovers() {
    let issuer = StandInIssuer::start().await;
    issuer.set_failing(true);
    let s = setup_with(issuer, true).await;
    for _ in 0..3 {
        s.refuses_a_valid_token("JWKS down").await;
    }
    assert_eq!(s.runs.count(), 0);
    assert!(
        s.app.events.published().is_empty(),
        "an unverified caller raises no notification: {:?}",
        s.app.events.published()
    );
    assert_eq!(s.issuer.fetches(), 1, "at most one fetch a minute");
    s.issuer.set_failing(false);
    s.clock.advance(Duration::seconds(61));
    s.accepts_a_valid_token("JWKS back").await;
    assert_eq!(s.issuer.fetches(), 2);
}

#[tokio::test]
async fn the_jwks_is_trusted_for_its_max_age_then_refetched() {
    let s = setup().await;
    s.issuer.set_cache_control(Some("public, max-age=120"));
    s.accepts_a_valid_token("first").await;
    s.clock.advance(Duration::seconds(100));
    s.accepts_a_valid_token("within max-age").await;
    assert_eq!(s.issuer.fetches(), 1);
    s.clock.advance(Duration::seconds(30));
    s.accepts_a_valid_token("past max-age").await;
    assert_eq!(
        s.issuer.fetches(),
        2,
        "a known kid is refetched past max-age"
    );

    // The issuer retires key one: once the cached set is past its age, key one is refused,
    // although its kid was known.
    s.issuer.serve_keys(&[TestKey::Two]);
    s.clock.advance(Duration::seconds(121));
    s.refuses_a_valid_token("retired key").await;
    assert_eq!(s.issuer.fetches(), 3);

    // Past its age with the issuer down: the old keys are not used.
    s.issuer.set_cache_control(Some("max-age=120"));
    s.issuer.serve_keys(&[TestKey::One]);
    s.clock.advance(Duration::seconds(61));
    s.accepts_a_valid_token("key one again").await;
    s.issuer.set_failing(true);
    s.clock.advance(Duration::seconds(121));
    s.refuses_a_valid_token("stale keys, issuer down").await;
    assert!(s.app.events.published().is_empty());
}

#[tokio::test]
async fn a_long_max_age_is_cut_to_six_hours() {
    let s = setup().await;
    s.issuer.set_cache_control(Some("max-age=604800"));
    s.accepts_a_valid_token("first").await;
    s.clock.advance(Duration::hours(5));
    s.accepts_a_valid_token("five hours on").await;
    assert_eq!(s.issuer.fetches(), 1);
    s.clock.advance(Duration::hours(1) + Duration::seconds(1));
    s.accepts_a_valid_token("six hours on").await;
    assert_eq!(s.issuer.fetches(), 2);
}

#[tokio::test]
async fn a_redirected_jwks_is_not_followed() {
    let elsewhere = StandInIssuer::start().await;
    let s = setup().await;
    s.issuer.set_redirect(Some(elsewhere.jwks_url()));
    s.refuses_a_valid_token("JWKS redirected").await;
    assert_eq!(s.issuer.fetches(), 1);
    assert_eq!(elsewhere.fetches(), 0, "the redirect was not followed");
    assert_eq!(s.runs.count(), 0);
}

#[tokio::test]
async fn without_a_configured_issuer_every_token_is_refused() {
    let issuer = StandInIssuer::start().await;
    let s = setup_with(issuer, false).await;
    s.refuses_a_valid_token("no issuer configured").await;
    s.assert_refused(s.post(None).await, "no issuer, no token")
        .await;
    assert_eq!(s.issuer.fetches(), 0);
}
