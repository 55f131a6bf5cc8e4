//! Verification of the OIDC ID token that an external scheduler presents to
//! POST /internal/dispatch (`Authorization: Bearer <token>`), with jsonwebtoken.
//!
//! Accepted only: RS256 (never the header's choice), a `kid` found in the issuer's JWKS, a valid
//! signature, `iss` and `aud` equal to the configured ones, `exp` in the future (jsonwebtoken's
//! default 60 s leeway for clock skew), `email` equal to the configured service account and
//! `email_verified: true`. The JWKS is fetched on first use and trusted for its `Cache-Control`
//! `max-age` (at least a minute, at most [`MAX_KEY_LIFETIME`]; an hour without one), so a key the
//! issuer retired stops being trusted within hours; an unknown `kid` (the issuer rotated its
//! keys) triggers a refetch, at most once a minute, so made-up `kid`s cannot turn requests into
//! fetches. The fetch follows no redirect: the JWKS is where the configuration says. One refetch
//! at a time, made outside the cache's lock: while it runs (up to [`FETCH_TIMEOUT`]) a token
//! whose key is cached and fresh is judged at once; one that needs the refetch (an unknown `kid`,
//! keys past their lifetime) waits for it and is judged after it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::platform::config::OidcConfig;
use crate::platform::endpoint::bearer_token;

/// The shortest time between two JWKS fetches.
pub const REFETCH_AFTER: chrono::Duration = chrono::Duration::seconds(60);
/// The longest a fetched JWKS is trusted, whatever its `max-age` says.
pub const MAX_KEY_LIFETIME: chrono::Duration = chrono::Duration::hours(6);
/// How long a JWKS without `max-age` is trusted.
pub const DEFAULT_KEY_LIFETIME: chrono::Duration = chrono::Duration::hours(1);
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// The token is missing or not acceptable: 401. The text is for logs (it never quotes the
    /// token or its claims).
    Unauthorized(&'static str),
    /// The issuer's keys could not be fetched (or are past their lifetime and could not be
    /// refetched), so no token can be judged: 401 like any unverified caller (a 5xx would let
    /// anyone who can reach the route raise error notifications while the issuer is down).
    JwksUnavailable(String),
}

#[derive(Deserialize)]
struct Claims {
    email: Option<String>,
    email_verified: Option<bool>,
}

#[derive(Default)]
struct KeyCache {
    keys: HashMap<String, Arc<DecodingKey>>,
    /// Until when `keys` are trusted (the fetch's time plus its lifetime).
    expires_at: Option<DateTime<Utc>>,
    last_fetch: Option<DateTime<Utc>>,
    /// Why the last fetch failed, while no key has ever been fetched.
    unavailable: Option<String>,
}

impl KeyCache {
    /// The key of `kid`, if the cached keys are within their lifetime and hold it.
    fn fresh_key(&self, kid: &str, now: DateTime<Utc>) -> Option<Arc<DecodingKey>> {
        self.fresh(now).then(|| self.keys.get(kid).cloned())?
    }

    fn fresh(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_some_and(|end| now < end)
    }

    fn may_fetch(&self, now: DateTime<Utc>) -> bool {
        self.last_fetch
            .is_none_or(|last| now - last >= REFETCH_AFTER)
    }

    /// Takes a fetch's outcome in. A failed fetch keeps keys still within their lifetime.
    fn store(
        &mut self,
        fetched: Result<(HashMap<String, Arc<DecodingKey>>, chrono::Duration), String>,
        now: DateTime<Utc>,
    ) {
        match fetched {
            Ok((keys, lifetime)) => {
                tracing::info!(
                    keys = keys.len(),
                    lifetime_secs = lifetime.num_seconds(),
                    "OIDC JWKS fetched"
                );
                self.keys = keys;
                self.expires_at = Some(now + lifetime);
                self.unavailable = None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "OIDC JWKS fetch failed");
                if self.keys.is_empty() || !self.fresh(now) {
                    self.keys.clear();
                    self.unavailable = Some(e);
                }
            }
        }
    }

    /// The answer for `kid` from the keys at hand, none past their lifetime.
    fn judge(
        &mut self,
        kid: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<Arc<DecodingKey>>, Rejection> {
        if !self.fresh(now) && !self.keys.is_empty() {
            self.keys.clear();
            self.unavailable = Some("the JWKS is past its lifetime".into());
        }
        match (self.keys.get(kid), &self.unavailable) {
            (Some(key), _) => Ok(Some(key.clone())),
            (None, Some(e)) => Err(Rejection::JwksUnavailable(e.clone())),
            (None, None) => Ok(None),
        }
    }
}

/// The check of POST /internal/dispatch's `Authorization` header, as the handler sees it (a trait,
/// so functions without the route link no JWT or JWKS code).
#[async_trait::async_trait]
pub trait TokenVerifier: Send + Sync {
    /// Checks the header's token. `now` (the app's clock) paces JWKS refetches.
    async fn verify(
        &self,
        authorization: Option<&http::HeaderValue>,
        now: DateTime<Utc>,
    ) -> Result<(), Rejection>;
}

#[async_trait::async_trait]
impl TokenVerifier for OidcVerifier {
    async fn verify(
        &self,
        authorization: Option<&http::HeaderValue>,
        now: DateTime<Utc>,
    ) -> Result<(), Rejection> {
        OidcVerifier::verify(self, authorization, now).await
    }
}

pub struct OidcVerifier {
    config: OidcConfig,
    validation: Validation,
    http: reqwest::Client,
    /// Held only to read or update, never across a fetch.
    cache: Mutex<KeyCache>,
    /// Held by the one refetch in flight, and awaited by the checks that need its outcome.
    refetch: tokio::sync::Mutex<()>,
}

impl OidcVerifier {
    pub fn new(config: OidcConfig) -> OidcVerifier {
        let mut validation = Validation::new(Algorithm::RS256);
        validation.set_issuer(&[config.issuer.as_str()]);
        validation.set_audience(&[config.audience.as_str()]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        let http = crate::platform::https::client_builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("a plain HTTPS client builds");
        OidcVerifier {
            config,
            validation,
            http,
            cache: Mutex::new(KeyCache::default()),
            refetch: tokio::sync::Mutex::new(()),
        }
    }

    /// Checks the `Authorization` header's token. `now` (the app's clock) paces JWKS refetches.
    pub async fn verify(
        &self,
        authorization: Option<&http::HeaderValue>,
        now: DateTime<Utc>,
    ) -> Result<(), Rejection> {
        let token = bearer_token(authorization).map_err(Rejection::Unauthorized)?;
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| Rejection::Unauthorized("the token is not a JWT"))?;
        if header.alg != Algorithm::RS256 {
            return Err(Rejection::Unauthorized(
                "the token is not signed with RS256",
            ));
        }
        let kid = header
            .kid
            .ok_or(Rejection::Unauthorized("the token has no kid"))?;
        let key = self.key(&kid, now).await?.ok_or(Rejection::Unauthorized(
            "the token's kid is not in the JWKS",
        ))?;
        let data = jsonwebtoken::decode::<Claims>(token, &key, &self.validation)
            .map_err(|e| Rejection::Unauthorized(describe(e.kind())))?;
        if data.claims.email.as_deref() != Some(self.config.service_account.as_str()) {
            return Err(Rejection::Unauthorized(
                "the token's email is not the configured service account",
            ));
        }
        if data.claims.email_verified != Some(true) {
            return Err(Rejection::Unauthorized("the token's email is not verified"));
        }
        Ok(())
    }

    /// The key with this `kid`, fetching the JWKS when none is cached, when the cached keys
    /// are past their lifetime, or when the `kid` is unknown; never twice within
    /// [`REFETCH_AFTER`]. Keys past their lifetime are not used, even when the refetch fails.
    /// A fresh cached key is answered at once, whatever fetch is in flight; every other check
    /// waits for the one refetch in flight (single flight), then looks again.
    async fn key(
        &self,
        kid: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<Arc<DecodingKey>>, Rejection> {
        if let Some(key) = self.cache().fresh_key(kid, now) {
            return Ok(Some(key));
        }
        let _refetch = self.refetch.lock().await;
        {
            let mut cache = self.cache();
            if let Some(key) = cache.fresh_key(kid, now) {
                return Ok(Some(key));
            }
            if !cache.may_fetch(now) {
                return cache.judge(kid, now);
            }
            cache.last_fetch = Some(now);
        }
        // Outside the cache's lock: checks of cached kids go on meanwhile.
        let fetched = self.fetch().await;
        let mut cache = self.cache();
        cache.store(fetched, now);
        cache.judge(kid, now)
    }

    fn cache(&self) -> MutexGuard<'_, KeyCache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The RSA signing keys of the JWKS, by `kid`, and how long to trust them.
    async fn fetch(&self) -> Result<(HashMap<String, Arc<DecodingKey>>, chrono::Duration), String> {
        let response = self
            .http
            .get(&self.config.jwks_url)
            .send()
            .await
            .map_err(|e| format!("GET JWKS: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("GET JWKS: status {}", response.status()));
        }
        let lifetime = key_lifetime(
            response
                .headers()
                .get(http::header::CACHE_CONTROL)
                .and_then(|v| v.to_str().ok()),
        );
        let set: JwkSet = response
            .json()
            .await
            .map_err(|e| format!("JWKS is not a JWK set: {e}"))?;
        let mut keys = HashMap::new();
        for jwk in &set.keys {
            let usable = matches!(jwk.algorithm, AlgorithmParameters::RSA(_))
                && jwk
                    .common
                    .key_algorithm
                    .is_none_or(|alg| alg == KeyAlgorithm::RS256)
                && jwk
                    .common
                    .public_key_use
                    .as_ref()
                    .is_none_or(|u| *u == PublicKeyUse::Signature);
            let (true, Some(kid)) = (usable, &jwk.common.key_id) else {
                continue;
            };
            if let Ok(key) = DecodingKey::from_jwk(jwk) {
                keys.insert(kid.clone(), Arc::new(key));
            }
        }
        Ok((keys, lifetime))
    }
}

/// How long a JWKS served with this `Cache-Control` is trusted: its `max-age`, within
/// [`REFETCH_AFTER`]..=[`MAX_KEY_LIFETIME`]; [`DEFAULT_KEY_LIFETIME`] without one.
pub fn key_lifetime(cache_control: Option<&str>) -> chrono::Duration {
    let max_age = cache_control
        .into_iter()
        .flat_map(|v| v.split(','))
        .find_map(|directive| {
            let (name, value) = directive.trim().split_once('=')?;
            name.trim()
                .eq_ignore_ascii_case("max-age")
                .then(|| value.trim().trim_matches('"').parse::<i64>().ok())?
        });
    match max_age {
        Some(secs) => chrono::Duration::seconds(secs).clamp(REFETCH_AFTER, MAX_KEY_LIFETIME),
        None => DEFAULT_KEY_LIFETIME,
    }
}

fn describe(kind: &jsonwebtoken::errors::ErrorKind) -> &'static str {
    use jsonwebtoken::errors::ErrorKind;
    match kind {
        ErrorKind::InvalidSignature => "the token's signature does not verify",
        ErrorKind::ExpiredSignature => "the token has expired",
        ErrorKind::ImmatureSignature => "the token is not valid yet",
        ErrorKind::InvalidIssuer => "the token's iss is not the configured issuer",
        ErrorKind::InvalidAudience => "the token's aud is not the configured audience",
        ErrorKind::MissingRequiredClaim(_) => "the token lacks a required claim (exp, iss, aud)",
        ErrorKind::InvalidAlgorithm => "the token's algorithm does not match its key",
        _ => "the token is malformed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_lifetime_is_max_age_within_bounds() {
        let secs = |v: Option<&str>| key_lifetime(v).num_seconds();
        assert_eq!(secs(Some("public, max-age=19800, must-revalidate")), 19_800);
        assert_eq!(secs(Some("max-age=5")), 60, "at least a minute");
        assert_eq!(secs(Some("max-age=86400")), 6 * 3600, "at most six hours");
        assert_eq!(secs(Some("no-cache")), 3600);
        assert_eq!(secs(Some("max-age=soon")), 3600);
        assert_eq!(secs(None), 3600);
    }
}
