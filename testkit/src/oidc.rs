//! A stand-in OIDC issuer on loopback: serves a JWKS made from the TEST-ONLY RSA keys committed
//! under `testkit/keys/` (see its README), counts how often it is fetched, can answer slowly,
//! and mints ID tokens the way an external scheduler's identity provider would, plus the forged
//! kinds an attacker would try.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use crate::loopback::{self, Loopback, json as respond};

/// TEST-ONLY keys (never credentials of anything real).
const KEY_1_PEM: &str = include_str!("../keys/oidc-test-rsa.pem");
const KEY_2_PEM: &str = include_str!("../keys/oidc-test-rsa-2.pem");
const KEY_1_PUBLIC_PEM: &str = include_str!("../keys/oidc-test-rsa.pub.pem");

pub const KID_1: &str = "koe-test-key-1";
pub const KID_2: &str = "koe-test-key-2";
pub const ISSUER: &str = "https://issuer.koe.test";
pub const AUDIENCE: &str = "https://koe.test/internal/dispatch";
pub const SERVICE_ACCOUNT: &str = "dispatch-scheduler@koe-test.iam.gserviceaccount.com";

/// One of the two test signing keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestKey {
    One,
    Two,
}

impl TestKey {
    pub fn kid(self) -> &'static str {
        match self {
            TestKey::One => KID_1,
            TestKey::Two => KID_2,
        }
    }

    fn encoding_key(self) -> EncodingKey {
        let pem = match self {
            TestKey::One => KEY_1_PEM,
            TestKey::Two => KEY_2_PEM,
        };
        EncodingKey::from_rsa_pem(pem.as_bytes()).expect("the committed test key parses")
    }

    /// The public half as a JWK, as an issuer publishes it.
    pub fn jwk(self) -> Jwk {
        let mut jwk = Jwk::from_encoding_key(&self.encoding_key(), Algorithm::RS256)
            .expect("an RSA key has a JWK");
        jwk.common.key_id = Some(self.kid().to_owned());
        jwk.common.public_key_use = Some(PublicKeyUse::Signature);
        jwk
    }
}

struct State {
    keys: Vec<TestKey>,
    fetches: usize,
    /// Fetches answered: their delay over, their answer leaving.
    answered: usize,
    failing: bool,
    cache_control: Option<String>,
    redirect_to: Option<String>,
    /// How long each answer is held back (real time) after the request is counted.
    delay: Duration,
}

pub struct StandInIssuer {
    server: Loopback,
    state: Arc<Mutex<State>>,
}

impl StandInIssuer {
    /// Serves a JWKS holding [`TestKey::One`] at `/jwks`.
    pub async fn start() -> StandInIssuer {
        let state = Arc::new(Mutex::new(State {
            keys: vec![TestKey::One],
            fetches: 0,
            answered: 0,
            failing: false,
            cache_control: None,
            redirect_to: None,
            delay: Duration::ZERO,
        }));
        let served = state.clone();
        let server = Loopback::start("stand-in issuer", move |request| {
            let state = served.clone();
            async move {
                let response = answer(&state, request.uri().path());
                let delay = state.lock().unwrap().delay;
                tokio::time::sleep(delay).await;
                state.lock().unwrap().answered += 1;
                response
            }
        })
        .await;
        StandInIssuer { server, state }
    }

    pub fn jwks_url(&self) -> String {
        format!("{}/jwks", self.server.url())
    }

    /// How many times the JWKS has been fetched.
    pub fn fetches(&self) -> usize {
        self.state.lock().unwrap().fetches
    }

    /// How many requests have been answered (a slow one counts once its delay is over).
    pub fn answered(&self) -> usize {
        self.state.lock().unwrap().answered
    }

    /// From now on the JWKS holds these keys (a key rotation).
    pub fn serve_keys(&self, keys: &[TestKey]) {
        self.state.lock().unwrap().keys = keys.to_vec();
    }

    /// From now on the JWKS endpoint answers 500 (or serves again).
    pub fn set_failing(&self, failing: bool) {
        self.state.lock().unwrap().failing = failing;
    }

    /// From now on the JWKS is served with this `Cache-Control` header (none by default).
    pub fn set_cache_control(&self, value: Option<&str>) {
        self.state.lock().unwrap().cache_control = value.map(str::to_owned);
    }

    /// From now on the JWKS endpoint answers 302 to `location` (or serves again with `None`).
    pub fn set_redirect(&self, location: Option<String>) {
        self.state.lock().unwrap().redirect_to = location;
    }

    /// From now on each answer leaves `delay` (real time) after its request arrived and was
    /// counted: a slow issuer.
    pub fn set_delay(&self, delay: Duration) {
        self.state.lock().unwrap().delay = delay;
    }

    /// The `DISPATCH_OIDC_*` variables that trust this issuer.
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("DISPATCH_OIDC_JWKS_URL", self.jwks_url()),
            ("DISPATCH_OIDC_ISSUER", ISSUER.to_owned()),
            ("DISPATCH_OIDC_AUDIENCE", AUDIENCE.to_owned()),
            ("DISPATCH_OIDC_SERVICE_ACCOUNT", SERVICE_ACCOUNT.to_owned()),
        ]
    }
}

fn answer(state: &Mutex<State>, path: &str) -> loopback::Response {
    if path != "/jwks" {
        return respond(404, "{}");
    }
    let mut state = state.lock().unwrap();
    state.fetches += 1;
    if state.failing {
        return respond(500, r#"{"error":"stand-in issuer told to fail"}"#);
    }
    if let Some(location) = &state.redirect_to {
        let mut response = respond(302, "{}");
        response
            .headers_mut()
            .insert("location", location.parse().unwrap());
        return response;
    }
    let set = JwkSet {
        keys: state.keys.iter().map(|k| k.jwk()).collect(),
    };
    let mut response = respond(200, serde_json::to_string(&set).unwrap());
    if let Some(value) = &state.cache_control {
        response
            .headers_mut()
            .insert("cache-control", value.parse().unwrap());
    }
    response
}

// ---------------------------------------------------------------------------------------------
// Tokens

fn epoch_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// The claims of a valid ID token for the dispatch route (expires in an hour).
pub fn valid_claims() -> Value {
    let now = epoch_now();
    json!({
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "104857600000000000001",
        "email": SERVICE_ACCOUNT,
        "email_verified": true,
        "iat": now,
        "exp": now + 3600,
    })
}

/// `valid_claims()` with `changes` merged in (a `null` removes the claim).
pub fn claims_with(changes: Value) -> Value {
    let mut claims = valid_claims();
    let map = claims.as_object_mut().unwrap();
    for (key, value) in changes.as_object().expect("changes are an object") {
        if value.is_null() {
            map.remove(key);
        } else {
            map.insert(key.clone(), value.clone());
        }
    }
    claims
}

/// An RS256 token signed with `key`, its header naming `kid` (or none).
pub fn mint(claims: &Value, key: TestKey, kid: Option<&str>) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, &key.encoding_key()).expect("signing works")
}

/// A valid token: RS256 with key one and its kid.
pub fn valid_token() -> String {
    mint(&valid_claims(), TestKey::One, Some(KID_1))
}

fn b64(value: &Value) -> String {
    URL_SAFE_NO_PAD.encode(value.to_string())
}

/// An unsigned token (`alg: none`) naming key one's kid.
pub fn alg_none_token(claims: &Value) -> String {
    let header = json!({"alg": "none", "typ": "JWT", "kid": KID_1});
    format!("{}.{}.", b64(&header), b64(claims))
}

/// The classic confusion attack: HS256 "signed" with the public key's PEM as the HMAC secret,
/// naming key one's kid.
pub fn hs256_with_public_key(claims: &Value) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(KID_1.to_owned());
    jsonwebtoken::encode(
        &header,
        claims,
        &EncodingKey::from_secret(KEY_1_PUBLIC_PEM.as_bytes()),
    )
    .expect("HMAC signing works")
}

/// `token` with its payload replaced by `claims`, keeping the original signature.
pub fn tampered(token: &str, claims: &Value) -> String {
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "a JWS compact token");
    format!("{}.{}.{}", parts[0], b64(claims), parts[2])
}
