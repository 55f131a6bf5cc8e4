//! The route table: the single source of which endpoint answers which method and path, on which
//! API, in which Lambda. The local server serves it; a test holds `template.yaml` and
//! `openapi.yaml` to it.

use http::Method;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Health,
    Info,
    Chat,
    ErrorTest,
    Agent,
    PutDevice,
    CreateCall,
    GetCall,
    CancelCall,
    Dispatch,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub api: Api,
    pub method: Method,
    pub path: &'static str,
    pub endpoint: Endpoint,
    /// The function's logical id in `template.yaml`.
    pub function: &'static str,
    /// The binary in `functions/` that runs this endpoint as a Lambda.
    pub binary: &'static str,
}

pub static ROUTES: &[Route] = &[
    Route {
        api: Api::Chat,
        method: Method::POST,
        path: "/api/chat",
        endpoint: Endpoint::Chat,
        function: "ChatFunction",
        binary: "chat",
    },
    Route {
        api: Api::Chat,
        method: Method::GET,
        path: "/api/info",
        endpoint: Endpoint::Info,
        function: "InfoFunction",
        binary: "info",
    },
    Route {
        api: Api::Chat,
        method: Method::GET,
        path: "/health",
        endpoint: Endpoint::Health,
        function: "HealthFunction",
        binary: "health",
    },
    Route {
        api: Api::Chat,
        method: Method::GET,
        path: "/api/error",
        endpoint: Endpoint::ErrorTest,
        function: "ErrorTestFunction",
        binary: "error-test",
    },
    Route {
        api: Api::Agent,
        method: Method::POST,
        path: "/agent",
        endpoint: Endpoint::Agent,
        function: "AgentFunction",
        binary: "agent",
    },
    Route {
        api: Api::Agent,
        method: Method::PUT,
        path: "/devices",
        endpoint: Endpoint::PutDevice,
        function: "PutDeviceFunction",
        binary: "put-device",
    },
    Route {
        api: Api::Agent,
        method: Method::POST,
        path: "/calls",
        endpoint: Endpoint::CreateCall,
        function: "CreateCallFunction",
        binary: "create-call",
    },
    Route {
        api: Api::Agent,
        method: Method::GET,
        path: "/calls",
        endpoint: Endpoint::GetCall,
        function: "GetCallFunction",
        binary: "get-call",
    },
    Route {
        api: Api::Agent,
        method: Method::DELETE,
        path: "/calls",
        endpoint: Endpoint::CancelCall,
        function: "CancelCallFunction",
        binary: "cancel-call",
    },
    Route {
        api: Api::Agent,
        method: Method::POST,
        path: "/internal/dispatch",
        endpoint: Endpoint::Dispatch,
        function: "DispatchFunction",
        binary: "dispatch",
    },
];

impl Endpoint {
    pub fn route(self) -> &'static Route {
        ROUTES
            .iter()
            .find(|r| r.endpoint == self)
            .expect("every endpoint has a route")
    }

    /// Largest request body accepted, in bytes (SPEC: 64 KiB for chat and agent, 8 KiB elsewhere).
    pub fn body_limit(self) -> usize {
        match self {
            Endpoint::Chat | Endpoint::Agent => 64 * 1024,
            _ => 8 * 1024,
        }
    }

    /// Endpoints behind `X-Api-Key`: the agent API's, except POST /internal/dispatch, which
    /// an external scheduler calls with an OIDC ID token instead.
    pub fn needs_api_key(self) -> bool {
        self.route().api == Api::Agent && self != Endpoint::Dispatch
    }

    /// Endpoints that read or write the store (their Lambdas must use DynamoDB).
    pub fn uses_store(self) -> bool {
        matches!(
            self,
            Endpoint::Agent
                | Endpoint::PutDevice
                | Endpoint::CreateCall
                | Endpoint::GetCall
                | Endpoint::CancelCall
                | Endpoint::Dispatch
        )
    }
}

/// Why a request matched no route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteMiss {
    NotFound,
    /// The path exists with other methods.
    MethodNotAllowed(Vec<Method>),
}

pub fn find(api: Api, method: &Method, path: &str) -> Result<&'static Route, RouteMiss> {
    let on_path: Vec<&Route> = ROUTES
        .iter()
        .filter(|r| r.api == api && r.path == path)
        .collect();
    if let Some(route) = on_path.iter().find(|r| r.method == method) {
        return Ok(route);
    }
    if on_path.is_empty() {
        Err(RouteMiss::NotFound)
    } else {
        Err(RouteMiss::MethodNotAllowed(
            on_path.iter().map(|r| r.method.clone()).collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_unique_per_api_method_and_path_and_binary() {
        let mut seen = std::collections::HashSet::new();
        let mut binaries = std::collections::HashSet::new();
        for r in ROUTES {
            assert!(seen.insert((r.api, r.method.clone(), r.path)), "{r:?}");
            assert!(binaries.insert(r.binary), "binary {} twice", r.binary);
            assert_eq!(r.endpoint.route(), r);
        }
    }

    #[test]
    fn misses_tell_not_found_from_wrong_method() {
        assert_eq!(
            find(Api::Chat, &Method::GET, "/nope"),
            Err(RouteMiss::NotFound)
        );
        assert_eq!(
            find(Api::Chat, &Method::DELETE, "/health"),
            Err(RouteMiss::MethodNotAllowed(vec![Method::GET]))
        );
        assert_eq!(
            find(Api::Agent, &Method::GET, "/health"),
            Err(RouteMiss::NotFound)
        );
        assert_eq!(
            find(Api::Chat, &Method::POST, "/api/chat")
                .unwrap()
                .endpoint,
            Endpoint::Chat
        );
    }
}
