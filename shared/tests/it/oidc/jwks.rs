//! The JWKS: fetched once, trusted for its max-age, refetched at most once a minute, no redirect.

use std::time::{Duration as StdDuration, Instant};

use chrono::Duration;
use koe_testkit::oidc::{KID_2, StandInIssuer, TestKey, mint, valid_claims, valid_token};

use super::{Setup, setup, setup_with};

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
    };
    let (triggering, waiting, known, made_up) = tokio::join!(
        s.post_token(&rotated),
        // Unknown kids while the refetch is in flight: they wait for it and are judged after it.
        async {
            refetch_in_flight().await;
            s.post_token(&rotated).await
        },
        // A known kid meanwhile: answered from the keys at hand, while the refetch is still
        // unanswered (how fast is the machine's; that it did not wait for the refetch is not).
        async {
            refetch_in_flight().await;
            let response = s.post_token(&valid_token()).await;
            (response, s.issuer.answered())
        },
        async {
            refetch_in_flight().await;
            let token = mint(&valid_claims(), TestKey::One, Some("made-up"));
            s.post_token(&token).await
        },
    );
    let (known, answered) = known;
    s.assert_accepted(known, "known kid during the refetch")
        .await;
    assert_eq!(
        answered, 1,
        "a known kid answered before the refetch ({SLOW:?}) was: only the first fetch answered"
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

/// With `cache_control` served, the keys fetched for a first token are trusted `within` later
/// (one fetch in all), and fetched again for a token `past` it.
async fn refetched_past_its_age(s: &Setup, cache_control: &str, within: Duration, past: Duration) {
    s.issuer.set_cache_control(Some(cache_control));
    s.accepts_a_valid_token("first").await;
    s.clock.advance(within);
    s.accepts_a_valid_token("within max-age").await;
    assert_eq!(s.issuer.fetches(), 1);
    s.clock.advance(past - within);
    s.accepts_a_valid_token("past max-age").await;
    assert_eq!(
        s.issuer.fetches(),
        2,
        "a known kid is refetched past max-age"
    );
}

#[tokio::test]
async fn the_jwks_is_trusted_for_its_max_age_then_refetched() {
    let s = setup().await;
    let (within, past) = (Duration::seconds(100), Duration::seconds(130));
    refetched_past_its_age(&s, "public, max-age=120", within, past).await;

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
    let (within, past) = (
        Duration::hours(5),
        Duration::hours(6) + Duration::seconds(1),
    );
    refetched_past_its_age(&s, "max-age=604800", within, past).await;
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
