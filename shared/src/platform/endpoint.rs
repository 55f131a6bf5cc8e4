//! An endpoint's one definition as the features declare it: its route (API, method, path,
//! function, binary, timeout, what its fixture answers, body cap, authentication) and its
//! handler over its ports. The route table that lists them all is `app`'s.

use std::future::Future;
use std::time::Duration;

use http::Method;

use super::error::{ApiError, ErrorCode};
use super::{Request, Response};

/// One endpoint: what a Lambda runs and what the local server routes to.
///
/// `Ports` are the adapters its handler talks to, as typed fields: a handler cannot reach a port
/// its endpoint did not ask for, and a function whose ports cannot be built does not start.
pub trait Endpoint: Send + Sync + 'static {
    const ROUTE: Route;
    /// What its handler is given; `app::ports` builds it from the adapters.
    type Ports: Send + Sync + 'static;

    fn handle(
        ports: &Self::Ports,
        request: Request,
    ) -> impl Future<Output = Result<Response, ApiError>> + Send;
}

/// The two public bases: `{base_url}` (chat, no auth) and `{agent_url}` (agent, `X-Api-Key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    Chat,
    Agent,
}

impl Api {
    /// The logical id of the API's `AWS::Serverless::HttpApi` in `template.yaml`.
    pub fn template_id(self) -> &'static str {
        match self {
            Api::Chat => "ChatApi",
            Api::Agent => "AgentApi",
        }
    }
}

/// How a request proves who sent it; checked before a byte of the body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    None,
    /// `X-Api-Key`, one of `AGENT_API_KEYS`.
    ApiKey,
    /// `Authorization: Bearer <OIDC ID token>`: its presence here, the token in the handler.
    Bearer,
}

/// The token of an `Authorization: Bearer <token>` header ([`Auth::Bearer`]), or why there is
/// none (for the log: it never quotes the header).
pub fn bearer_token(authorization: Option<&http::HeaderValue>) -> Result<&str, &'static str> {
    let value = authorization
        .ok_or("no Authorization header")?
        .to_str()
        .map_err(|_| "the Authorization header is not text")?;
    match value.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(token.trim())
        }
        _ => Err("the Authorization header is not Bearer"),
    }
}

/// The 401 of a [`Auth::Bearer`] route (POST /internal/dispatch): the same text whatever was
/// wrong, the reason goes to the log only.
pub fn bearer_refusal() -> ApiError {
    ApiError::new(
        ErrorCode::Unauthorized,
        "Authorization must be a Bearer OIDC ID token of the dispatch service account",
    )
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub api: Api,
    pub method: Method,
    pub path: &'static str,
    /// The function's logical id in `template.yaml`.
    pub function: &'static str,
    /// The binary in `functions/` that runs this endpoint as a Lambda.
    pub binary: &'static str,
    /// Largest request body accepted, in bytes.
    pub body_limit: usize,
    /// The function's `Timeout` in `template.yaml` (held to it by `contract_files`): the
    /// deadline of a request where no Lambda context gives one (koe-local, tests).
    pub timeout: Duration,
    /// What its fixture, [`Route::fixture_file`], answers: the fixture tests send it and check
    /// this; the docs' fixture table is written from it.
    pub fixture: FixtureAnswer,
    pub auth: Auth,
}

/// What a route's committed fixture answers in the tests, against their stand-ins (OpenAI's
/// reply `フィクスチャの返事`, the planner scripted to plan one calendar step) and after the
/// fixtures before it in route-table order (so a reservation finds the device `put-device`
/// registered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixtureAnswer {
    /// The answer's HTTP status.
    pub status: u16,
    /// Text the answer's JSON body holds; empty: the answer has no body.
    pub holds: &'static str,
}

/// Worst-case bytes of one string character in a body we size for: UTF-8 is at most 4, and
/// JSON's mandatory escapes of control characters (`\u001f`) are 6.
pub const JSON_BYTES_PER_CHAR: usize = 6;
/// Room for what the formulas below leave out (number forms such as `4096.0`, whitespace).
pub const BODY_SLACK: usize = 1024;

/// A JSON string of at most `chars` characters, quotes included.
pub const fn json_str(chars: usize) -> usize {
    2 + chars * JSON_BYTES_PER_CHAR
}

/// Body cap of every other endpoint.
pub const SMALL_BODY_LIMIT: usize = 8 * 1024;

impl Route {
    /// A route of `api` with the small body cap and the API's credential (chat: none; agent:
    /// `X-Api-Key`); `timeout_secs` is its function's `Timeout`, `fixture` what its fixture
    /// answers.
    pub const fn new(
        api: Api,
        method: Method,
        path: &'static str,
        function: &'static str,
        binary: &'static str,
        timeout_secs: u64,
        fixture: FixtureAnswer,
    ) -> Route {
        Route {
            api,
            method,
            path,
            function,
            binary,
            body_limit: SMALL_BODY_LIMIT,
            timeout: Duration::from_secs(timeout_secs),
            fixture,
            auth: match api {
                Api::Chat => Auth::None,
                Api::Agent => Auth::ApiKey,
            },
        }
    }

    /// The same route with a body cap of its own.
    pub const fn with_body_limit(mut self, body_limit: usize) -> Route {
        self.body_limit = body_limit;
        self
    }

    /// The same route with another credential.
    pub const fn with_auth(mut self, auth: Auth) -> Route {
        self.auth = auth;
        self
    }

    /// Its committed event, from the repository's root: `events/<binary>.json`.
    pub fn fixture_file(&self) -> String {
        format!("events/{}.json", self.binary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_header_yields_a_token() {
        let header = |v: &str| http::HeaderValue::from_str(v).unwrap();
        assert_eq!(
            bearer_token(Some(&header("Bearer abc.def.ghi"))),
            Ok("abc.def.ghi")
        );
        assert_eq!(bearer_token(Some(&header("bearer abc"))), Ok("abc"));
        for bad in [
            "Basic dXNlcjpwYXNz",
            "Bearer",
            "Bearer ",
            "abc.def.ghi",
            "Token abc",
        ] {
            assert!(bearer_token(Some(&header(bad))).is_err(), "{bad}");
        }
        assert!(bearer_token(None).is_err());
    }
}
