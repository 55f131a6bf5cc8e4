//! The APNs provider token: a JWT (ES256) signed with the team's `.p8` key, sent as
//! `authorization: bearer <token>` with every push.
//!
//! Apple accepts a token for an hour and answers 429 `TooManyProviderTokenUpdates` to a provider
//! that changes tokens more often than every 20 minutes, so a token is signed when first needed
//! and kept for [`RENEW_AFTER_SECS`]; signing happens under a lock, so concurrent pushes never
//! sign two.

use std::sync::{Arc, Mutex};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

use crate::platform::clock::{Clock, SystemClock};

/// A token's age at which the next push signs a new one: within Apple's 20..60 minutes.
pub const RENEW_AFTER_SECS: i64 = 50 * 60;
/// Apple answers 429 `TooManyProviderTokenUpdates` to a token that replaces another sooner.
pub const KEEP_AT_LEAST_SECS: i64 = 20 * 60;

pub struct ProviderToken {
    key: EcdsaKeyPair,
    rng: SystemRandom,
    key_id: String,
    team_id: String,
    /// Tells the token's age and its `iat`.
    clock: Arc<dyn Clock>,
    current: Mutex<Option<Signed>>,
}

struct Signed {
    bearer: String,
    issued_at: i64,
}

impl ProviderToken {
    /// Parses the key (PEM of a PKCS#8 EC P-256 private key) without signing anything. The error
    /// names the problem, never the key.
    pub fn new(pem: &str, key_id: &str, team_id: &str) -> Result<ProviderToken, String> {
        ProviderToken::with_clock(pem, key_id, team_id, Arc::new(SystemClock))
    }

    /// [`ProviderToken::new`], telling time by `clock`.
    pub fn with_clock(
        pem: &str,
        key_id: &str,
        team_id: &str,
        clock: Arc<dyn Clock>,
    ) -> Result<ProviderToken, String> {
        let body: String = pem
            .lines()
            .filter(|line| !line.starts_with("-----"))
            .collect();
        let der = STANDARD
            .decode(body.trim())
            .map_err(|e| format!("its base64 does not decode: {e}"))?;
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der)
            .map_err(|e| format!("it does not parse as one: {e}"))?;
        Ok(ProviderToken {
            key,
            rng: SystemRandom::new(),
            key_id: key_id.to_owned(),
            team_id: team_id.to_owned(),
            clock,
            current: Mutex::new(None),
        })
    }

    /// The `authorization` header's value: the current token, signed now if there is none or it
    /// is [`RENEW_AFTER_SECS`] old. A clock that went back keeps the token: a new one within
    /// [`KEEP_AT_LEAST_SECS`] would be refused.
    pub fn bearer(&self) -> Result<String, String> {
        let now = self.clock.now().timestamp();
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(signed) = current.as_ref()
            && now - signed.issued_at < RENEW_AFTER_SECS
        {
            return Ok(signed.bearer.clone());
        }
        let bearer = format!("bearer {}", self.sign(now)?);
        *current = Some(Signed {
            bearer: bearer.clone(),
            issued_at: now,
        });
        Ok(bearer)
    }

    /// APNs answered 403 `ExpiredProviderToken` to `used` (its clock is ahead of ours): whether
    /// a push may go again with a new token. It may if the token was replaced meanwhile, or is
    /// old enough to be ([`KEEP_AT_LEAST_SECS`]; then it is, now); not if it is younger.
    pub fn renew_expired(&self, used: &str) -> bool {
        let now = self.clock.now().timestamp();
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let Some(signed) = current.as_ref() else {
            return false;
        };
        if signed.bearer != used {
            return true;
        }
        if now - signed.issued_at < KEEP_AT_LEAST_SECS {
            return false;
        }
        let Ok(token) = self.sign(now) else {
            return false;
        };
        *current = Some(Signed {
            bearer: format!("bearer {token}"),
            issued_at: now,
        });
        true
    }

    fn sign(&self, issued_at: i64) -> Result<String, String> {
        let header = serde_json::json!({ "alg": "ES256", "kid": self.key_id });
        let claims = serde_json::json!({ "iss": self.team_id, "iat": issued_at });
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = self
            .key
            .sign(&self.rng, input.as_bytes())
            .map_err(|_| "the provider token could not be signed".to_owned())?;
        Ok(format!(
            "{input}.{}",
            URL_SAFE_NO_PAD.encode(signature.as_ref())
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST_P8: &str = include_str!("../../../testkit/keys/apns-test.p8");

    #[test]
    fn a_token_is_an_es256_jwt_of_the_key_and_team_and_is_reused() {
        let token = ProviderToken::new(TEST_P8, "ABCDE12345", "TEAM123456").unwrap();
        let first = token.bearer().unwrap();
        assert_eq!(token.bearer().unwrap(), first, "kept, not signed again");
        let jwt = first.strip_prefix("bearer ").unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(
            header,
            serde_json::json!({"alg": "ES256", "kid": "ABCDE12345"})
        );
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(claims["iss"], "TEAM123456");
        assert_eq!(URL_SAFE_NO_PAD.decode(parts[2]).unwrap().len(), 64);
    }

    #[test]
    fn an_old_token_is_renewed() {
        let token = ProviderToken::new(TEST_P8, "ABCDE12345", "TEAM123456").unwrap();
        let first = token.bearer().unwrap();
        token.current.lock().unwrap().as_mut().unwrap().issued_at -= RENEW_AFTER_SECS;
        assert_ne!(token.bearer().unwrap(), first);
    }
}
