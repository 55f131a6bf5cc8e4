//! One pass of every route against one store: its apps, devices and the ways it sends a request.

use std::sync::Arc;

use chrono::{Duration, FixedOffset, Utc};
use koe::domain::device::{AlertToken, Device, DeviceId, PushEnvironment, VoipToken};
use koe::domain::reservation::{Reservation, ScheduledAt};
use koe::store::prelude::*;
use koe_testkit::harness::{TestApp, send, spawn_app_with};
use koe_testkit::oidc::StandInIssuer;
use serde_json::{Value, json};

use crate::sentinels::*;

/// One pass of every route against one store.
pub(super) struct Pass {
    pub(super) name: &'static str,
    pub(super) app: TestApp,
    /// The same store, with `AGENT_REQUIRE_DEVICE_SECRET=true`.
    pub(super) switched: TestApp,
    /// [`Devices::secret`]'s proven secret, once registered.
    pub(super) device_secret: Option<String>,
    /// A store that is down: store-backed routes answer 503, the agent fails open.
    pub(super) down: bool,
    pub(super) devices: Devices,
    /// ID tokens and device secrets (and their hashes) used in this pass: none may be logged.
    pub(super) tokens: Vec<String>,
    /// Serves the JWKS for POST /internal/dispatch.
    pub(super) _issuer: StandInIssuer,
}

impl Pass {
    pub(super) async fn start(
        name: &'static str,
        store: Option<Arc<dyn Store>>,
        down: bool,
    ) -> Pass {
        let issuer = StandInIssuer::start().await;
        let mut vars: Vec<(&str, String)> = issuer.vars();
        vars.extend([
            ("AGENT_API_KEYS", AGENT_KEY.to_owned()),
            ("OPENAI_API_KEY", OPENAI_KEY.to_owned()),
            ("DEVICE_HASH_SALT", SALT.to_owned()),
            ("AGENT_DAILY_LIMIT", "2".to_owned()),
        ]);
        let mut vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let app = spawn_app_with(&vars, move |app| match store {
            Some(store) => app.with_store(store),
            None => app,
        })
        .await;
        vars.push(("AGENT_REQUIRE_DEVICE_SECRET", "true"));
        let shared = app.store.clone();
        let switched = spawn_app_with(&vars, move |app| app.with_store(shared)).await;
        Pass {
            name,
            app,
            switched,
            device_secret: None,
            down,
            devices: Devices::of(name),
            tokens: Vec::new(),
            _issuer: issuer,
        }
    }

    pub(super) fn agent(&self, method: http::Method, path: &str) -> reqwest::RequestBuilder {
        self.app.agent_with_key(method, path, AGENT_KEY)
    }

    /// [`Pass::expect`] for `method path` with `body` (JSON) and the agent key.
    pub(super) async fn expect_json(
        &self,
        what: &str,
        (method, path): (http::Method, &str),
        body: &Value,
        healthy: u16,
        store_backed: bool,
    ) -> Value {
        let request = self.agent(method, path).body(body.to_string());
        self.expect(what, request, healthy, store_backed).await
    }

    /// `method path` with `body` and a wrong key: refused with a 401, whatever the store.
    pub(super) async fn expect_wrong_key(
        &self,
        what: &str,
        (method, path): (http::Method, &str),
        body: &Value,
    ) {
        let request = self.app.agent_with_key(method, path, WRONG_KEY);
        self.expect(what, request.body(body.to_string()), 401, false)
            .await;
    }

    /// [`Pass::expect`] for `GET path` with the agent key.
    pub(super) async fn expect_get(
        &self,
        what: &str,
        path: &str,
        healthy: u16,
        store_backed: bool,
    ) -> Value {
        let request = self.agent(http::Method::GET, path);
        self.expect(what, request, healthy, store_backed).await
    }

    /// Sends and checks the status: `healthy` normally, 503 for a store-backed answer while
    /// the store is down (`store_backed`).
    pub(super) async fn expect(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
        healthy: u16,
        store_backed: bool,
    ) -> Value {
        let response = send(request).await;
        let status = response.status().as_u16();
        let expected = if self.down && store_backed {
            503
        } else {
            healthy
        };
        let text = response.text().await.unwrap();
        assert_eq!(status, expected, "{} pass, {what}: {text}", self.name);
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// Like [`Pass::expect`] for a refusal: also checks the error code (unless the store is down).
    pub(super) async fn refused(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
        status: u16,
        code: &str,
    ) {
        let body = self.expect(what, request, status, true).await;
        if !self.down {
            assert_eq!(body["code"], code, "{} pass, {what}: {body}", self.name);
        }
    }

    /// [`Devices::secret`] registered (`PUT /devices`) and its secret proven (a `PUT` that
    /// sends it); the secret. While the store is down, both answer 503 and a made-up one stands
    /// in. The secret and its hash join the forbidden strings.
    pub(super) async fn device_secret(&mut self) -> String {
        if let Some(secret) = &self.device_secret {
            return secret.clone();
        }
        let id = self.devices.secret.clone();
        let body = json!({"deviceId": id, "voipToken": voip_token()}).to_string();
        let first = self
            .expect(
                "PUT /devices, issues a secret",
                self.agent(http::Method::PUT, "/devices").body(body.clone()),
                200,
                true,
            )
            .await;
        let secret = match first["deviceSecret"].as_str() {
            Some(secret) => secret.to_owned(),
            None => WRONG_SECRET.to_owned(),
        };
        self.tokens.push(secret.clone());
        self.tokens.push(koe::domain::device::secret_hash(&secret));
        self.expect(
            "PUT /devices, proves the secret",
            self.agent(http::Method::PUT, "/devices")
                .header("x-device-secret", &secret)
                .body(body),
            200,
            true,
        )
        .await;
        self.device_secret = Some(secret.clone());
        secret
    }

    pub(super) async fn store_device(&self, id: &str) -> Device {
        let device = Device {
            device_id: DeviceId::parse("deviceId", id).unwrap(),
            voip_token: VoipToken::parse("voipToken", &voip_token()).unwrap(),
            environment: PushEnvironment::Sandbox,
            updated_at: Utc::now(),
            confirms_calls: false,
            alert_token: Some(AlertToken::parse("alertToken", &alert_token()).unwrap()),
        };
        if !self.down {
            self.app.store.put_device(&device).await.unwrap();
        }
        device
    }

    pub(super) async fn store_reservation(&self, device: &Device, in_ms: i64) -> Reservation {
        let now = Utc::now();
        let jst = FixedOffset::east_opt(9 * 3600).unwrap();
        let r = Reservation::new(
            device.device_id.clone(),
            ScheduledAt::from_stored((now + Duration::milliseconds(in_ms)).with_timezone(&jst)),
            Some(CALLER.into()),
            now,
        );
        if !self.down {
            self.app
                .store
                .create_reservation(&r, now, now - Duration::seconds(150))
                .await
                .unwrap();
        }
        r
    }
}
