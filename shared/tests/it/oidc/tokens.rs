//! The token: a valid one is 202 and asks for one run; a forged or malformed one is 401.

use koe_testkit::harness::TEST_API_KEY;
use koe_testkit::oidc::{self, KID_1, TestKey, claims_with, mint, valid_claims, valid_token};
use serde_json::json;

use super::{bearer, setup, signed_by_key_one};

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
