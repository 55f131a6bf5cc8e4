//! Log audit: every route of `koe::ROUTES` is called through the real local server, with
//! sentinel personal data wherever such data can go. That covers message contents, the model's
//! replies, calendar titles and times, VoIP tokens, caller names, API keys (the agent's and
//! OpenAI's), ID tokens and their claims, and device ids in clear. Each route is called on its
//! success path and on the refusals that repeat input back (400, 401, 404, 409), on the memory
//! store, on DynamoDB Local and on a DynamoDB that is down. A trace-level capture of everything
//! the process logs (`koe_testkit::logs::capture`, the production JSON format, dependencies
//! included) must then hold none of the sentinels. The device ids may appear only as their
//! salted hash.
//!
//! Coverage follows the route table: every route's endpoint runs through `exercise` (a route
//! without a scenario here fails the test), and the
//! test fails if any route of `ROUTES` left no access-log line in a pass. Beyond each route's
//! success and refusals, the paths that carry a credential or answer from a kept record: requests
//! sending `X-Device-Secret` (its issued value, and its hash, must never be logged; a made-up
//! one neither), 403 `DEVICE_SECRET_REQUIRED` on `PUT /devices`, `/calls`, `/calls/confirm` and, with
//! `AGENT_REQUIRE_DEVICE_SECRET` on (a second app on the pass's store), `POST /agent`; and an
//! `Idempotency-Key` (a sentinel) replayed, reused with another body and replayed once its
//! reservation is gone.
//!
//! Its own test binary, so the capture sees only this binary's runs.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{Duration, FixedOffset, Utc};
use koe::ROUTES;
use koe::config::{Config, Vars};
use koe::dispatch::{Dispatcher, RunCause};
use koe::domain::device::{Device, DeviceId, PushEnvironment, VoipToken};
use koe::domain::reservation::{CallId, Reservation, ReservationStatus, RunToken, ScheduledAt};
use koe::store::Outcome;
use koe::store::dynamodb::DynamoStore;
use koe::store::prelude::*;
use koe_testkit::dynamodb;
use koe_testkit::harness::{TestApp, issued_step_ids_with, send, spawn_app_with};
use koe_testkit::logs::{self, LogCapture};
use koe_testkit::oidc::{self, StandInIssuer, TestKey, claims_with};
use koe_testkit::openai::Behaviour;
use serde_json::{Value, json};

/// The requests the passes send most, as [`Pass::expect_json`] takes them.
const POST_AGENT: (http::Method, &str) = (http::Method::POST, "/agent");
const POST_CALLS: (http::Method, &str) = (http::Method::POST, "/calls");
const PUT_DEVICES: (http::Method, &str) = (http::Method::PUT, "/devices");

const SALT: &str = "audit-salt";
const AGENT_KEY: &str = "SENTINEL-AGENTKEY-4a1f";
const WRONG_KEY: &str = "SENTINEL-WRONGKEY-8b2e";
const OPENAI_KEY: &str = "sk-SENTINEL-OPENAIKEY-c93d";
const CHAT_TEXT: &str = "SENTINEL-CHATTEXT-d04c";
const CHAT_REPLY: &str = "SENTINEL-CHATREPLY-e15b";
const AGENT_MESSAGE: &str = "SENTINEL-AGENTMSG-f26a";
const AGENT_REPLY: &str = "SENTINEL-AGENTREPLY-0379";
const TITLE: &str = "SENTINEL-TITLE-1488";
/// Calendar times nobody else uses, so any trace of them is a leak.
const EVENT_START: &str = "2031-07-19T13:37:11+09:00";
const EVENT_END: &str = "2031-07-19T14:48:22+09:00";
const CALLER: &str = "SENTINEL-CALLER-2597";
const UPSTREAM: &str = "SENTINEL-UPSTREAM-36a6";
const ID_TOKEN_JUNK: &str = "SENTINEL-IDTOKEN-47b5";
const CLAIM_EMAIL: &str = "sentinel-claim-58c4@evil.test";
/// A made-up `X-Device-Secret` (the issued ones are collected per pass and forbidden too).
const WRONG_SECRET: &str = "SENTINEL-DEVSECRET-69d7";
const IDEMPOTENCY_KEY: &str = "SENTINEL-IDEMKEY-7ae8";
/// VoIP token hex (sent in upper case; stored lower case).
const TOKEN_HEX: &str = "5e471ae15e471ae1";

/// The device ids of one pass, in clear (with the pass's name, so passes never share them).
struct Devices {
    agent: String,
    registered: String,
    unregistered: String,
    cancelled: String,
    dispatched: String,
    /// Registered with its secret proven.
    secret: String,
    /// Reserved with an `Idempotency-Key`.
    idempotent: String,
}

impl Devices {
    fn of(pass: &str) -> Devices {
        let id = |what: &str| format!("SENTINEL-DEVICE-{what}-{pass}");
        Devices {
            agent: id("agent"),
            registered: id("registered"),
            unregistered: id("unregistered"),
            cancelled: id("cancelled"),
            dispatched: id("dispatched"),
            secret: id("secret"),
            idempotent: id("idempotent"),
        }
    }

    fn all(&self) -> [&str; 7] {
        [
            &self.agent,
            &self.registered,
            &self.unregistered,
            &self.cancelled,
            &self.dispatched,
            &self.secret,
            &self.idempotent,
        ]
    }
}

fn voip_token() -> String {
    TOKEN_HEX.repeat(4).to_uppercase()
}

/// Every sentinel, and distinctive parts a partial or re-encoded leak would show.
fn forbidden() -> Vec<String> {
    let mut list: Vec<String> = [
        AGENT_KEY,
        "AGENTKEY-4a1f",
        WRONG_KEY,
        "WRONGKEY-8b2e",
        OPENAI_KEY,
        "OPENAIKEY-c93d",
        CHAT_TEXT,
        "CHATTEXT-d04c",
        CHAT_REPLY,
        "CHATREPLY-e15b",
        AGENT_MESSAGE,
        "AGENTMSG-f26a",
        AGENT_REPLY,
        "AGENTREPLY-0379",
        TITLE,
        "TITLE-1488",
        // The event times: their date (also in UTC), and the times with their offset (a bare
        // "13:37:11" could be any log line's own timestamp).
        "2031-07-19",
        "13:37:11+09:00",
        "14:48:22+09:00",
        CALLER,
        "CALLER-2597",
        UPSTREAM,
        "UPSTREAM-36a6",
        ID_TOKEN_JUNK,
        "IDTOKEN-47b5",
        CLAIM_EMAIL,
        TOKEN_HEX,
        &TOKEN_HEX.to_uppercase(),
        "SENTINEL-DEVICE",
        "DEVICE-agent",
        "DEVICE-registered",
        "DEVICE-unregistered",
        "DEVICE-cancelled",
        "DEVICE-dispatched",
        "DEVICE-secret",
        "DEVICE-idempotent",
        WRONG_SECRET,
        "DEVSECRET-69d7",
        IDEMPOTENCY_KEY,
        "IDEMKEY-7ae8",
        // The sentinels' shared prefix: no sentinel at all, whole or in part.
        "SENTINEL",
        "sentinel",
    ]
    .map(str::to_owned)
    .to_vec();
    list.push(format!("{:?}", CHAT_TEXT.as_bytes()));
    list
}

/// One pass of every route against one store.
struct Pass {
    name: &'static str,
    app: TestApp,
    /// The same store, with `AGENT_REQUIRE_DEVICE_SECRET=true`.
    switched: TestApp,
    /// [`Devices::secret`]'s proven secret, once registered.
    device_secret: Option<String>,
    /// A store that is down: store-backed routes answer 503, the agent fails open.
    down: bool,
    devices: Devices,
    /// ID tokens and device secrets (and their hashes) used in this pass: none may be logged.
    tokens: Vec<String>,
    /// Serves the JWKS for POST /internal/dispatch.
    _issuer: StandInIssuer,
}

impl Pass {
    async fn start(name: &'static str, store: Option<Arc<dyn Store>>, down: bool) -> Pass {
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

    fn agent(&self, method: http::Method, path: &str) -> reqwest::RequestBuilder {
        self.app.agent_with_key(method, path, AGENT_KEY)
    }

    /// [`Pass::expect`] for `method path` with `body` (JSON) and the agent key.
    async fn expect_json(
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
    async fn expect_wrong_key(
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
    async fn expect_get(&self, what: &str, path: &str, healthy: u16, store_backed: bool) -> Value {
        let request = self.agent(http::Method::GET, path);
        self.expect(what, request, healthy, store_backed).await
    }

    /// Sends and checks the status: `healthy` normally, 503 for a store-backed answer while
    /// the store is down (`store_backed`).
    async fn expect(
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
    async fn refused(&self, what: &str, request: reqwest::RequestBuilder, status: u16, code: &str) {
        let body = self.expect(what, request, status, true).await;
        if !self.down {
            assert_eq!(body["code"], code, "{} pass, {what}: {body}", self.name);
        }
    }

    /// [`Devices::secret`] registered (`PUT /devices`) and its secret proven (a `PUT` that
    /// sends it); the secret. While the store is down, both answer 503 and a made-up one stands
    /// in. The secret and its hash join the forbidden strings.
    async fn device_secret(&mut self) -> String {
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

    async fn store_device(&self, id: &str) -> Device {
        let device = Device {
            device_id: DeviceId::parse("deviceId", id).unwrap(),
            voip_token: VoipToken::parse("voipToken", &voip_token()).unwrap(),
            environment: PushEnvironment::Sandbox,
            updated_at: Utc::now(),
            confirms_calls: false,
        };
        if !self.down {
            self.app.store.put_device(&device).await.unwrap();
        }
        device
    }

    async fn store_reservation(&self, device: &Device, in_ms: i64) -> Reservation {
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

/// Calls one endpoint (by its binary's name) the ways that put personal data in front of it. A
/// route without a scenario fails the test.
async fn exercise(pass: &mut Pass, binary: &str) {
    let d = &pass.devices;
    match binary {
        "health" => {
            pass.expect(
                "GET /health",
                pass.app.client.get(format!("{}/health", pass.app.chat_url)),
                200,
                false,
            )
            .await;
        }
        "info" => {
            pass.expect(
                "GET /api/info",
                pass.app
                    .client
                    .get(format!("{}/api/info", pass.app.chat_url)),
                200,
                false,
            )
            .await;
        }
        "error-test" => {
            pass.expect(
                "GET /api/error",
                pass.app
                    .client
                    .get(format!("{}/api/error", pass.app.chat_url)),
                500,
                false,
            )
            .await;
        }
        "chat" => {
            let url = format!("{}/api/chat", pass.app.chat_url);
            let body = json!({"messages": [
                {"role": "system", "content": format!("Be kind. {CHAT_TEXT}")},
                {"role": "user", "content": CHAT_TEXT},
            ]})
            .to_string();
            pass.app.openai.script([Behaviour::complete(CHAT_REPLY)]);
            let reply = pass
                .expect(
                    "chat",
                    pass.app.client.post(&url).body(body.clone()),
                    200,
                    false,
                )
                .await;
            assert_eq!(reply["message"]["content"], CHAT_REPLY);
            // A provider error whose body echoes the request and the key.
            pass.app.openai.script([Behaviour::Raw {
                status: 400,
                body: json!({"error": {"message": format!("{UPSTREAM}: {CHAT_TEXT} {OPENAI_KEY}"),
                    "type": "invalid_request_error"}})
                .to_string(),
            }]);
            pass.expect(
                "chat, provider 400",
                pass.app.client.post(&url).body(body),
                500,
                false,
            )
            .await;
            // Refusals next to the data.
            for bad in [
                json!({"messages": [{"role": CHAT_TEXT, "content": CHAT_TEXT}]}).to_string(),
                json!({"messages": [{"role": "user", "content": CHAT_TEXT}], "model": CHAT_TEXT})
                    .to_string(),
                format!(r#"{{"messages": [{{"role": "user", "content": "{CHAT_TEXT}" ,,"#),
            ] {
                pass.expect(
                    "chat, invalid",
                    pass.app.client.post(&url).body(bad),
                    400,
                    false,
                )
                .await;
            }
        }
        "agent" => {
            let round1 = json!({"message": AGENT_MESSAGE, "capabilities": ["calendar"],
                "deviceId": d.agent, "timezone": "Asia/Tokyo"});
            pass.app.openai.set_default(Behaviour::schema_valid());
            pass.expect_json("agent round 1", POST_AGENT, &round1, 200, false)
                .await;
            // The model answers with the user's data in it: once refused (bad emotion), then used.
            pass.app.openai.script([
                Behaviour::complete(
                    json!({"decision": {"type": "answer",
                    "reply": format!("{AGENT_REPLY} {AGENT_MESSAGE}"), "emotion": TITLE}})
                    .to_string(),
                ),
                Behaviour::complete(
                    json!({"decision": {"type": "answer",
                    "reply": AGENT_REPLY, "emotion": "happy"}})
                    .to_string(),
                ),
            ]);
            let answer = pass
                .expect(
                    "agent round 1, answer",
                    pass.agent(http::Method::POST, "/agent")
                        .body(round1.to_string()),
                    200,
                    false,
                )
                .await;
            assert_eq!(answer["reply"], AGENT_REPLY);
            // Over the daily limit (2): 429 (while the store is down, the limit fails open).
            let limited = if pass.down { 200 } else { 429 };
            pass.expect(
                "agent round 1, limited",
                pass.agent(http::Method::POST, "/agent")
                    .body(round1.to_string()),
                limited,
                false,
            )
            .await;
            let step_id = issued_step_ids_with(SALT, &d.agent, 1, pass.app.clock.now()).remove(0);
            let round2 = json!({"message": AGENT_MESSAGE, "deviceId": d.agent, "results": [
            {"stepId": step_id, "tool": "calendar", "output": {"events": [
                {"title": TITLE, "start": EVENT_START, "end": EVENT_END},
                {"title": format!("{TITLE} 2"), "start": EVENT_START, "end": EVENT_END, "allDay": true},
            ]}}]});
            pass.app.openai.script([Behaviour::complete(
                json!({"reply": AGENT_REPLY, "emotion": "happy"}).to_string(),
            )]);
            pass.expect_json("agent round 2", POST_AGENT, &round2, 200, false)
                .await;
            let mut bad = round2.clone();
            bad["results"][0]["output"]["events"][0]["title"] = json!(TITLE.repeat(20));
            pass.expect_json(
                "agent round 2, title too long",
                POST_AGENT,
                &bad,
                400,
                false,
            )
            .await;
            let mut bad = round2.clone();
            bad["results"][0]["output"]["events"][0]["start"] =
                json!(format!("{TITLE} {EVENT_START}"));
            pass.expect_json("agent round 2, bad time", POST_AGENT, &bad, 400, false)
                .await;
            let bad = json!({"message": AGENT_MESSAGE, "capabilities": ["calendar"],
                "deviceId": format!("{} {AGENT_MESSAGE}", d.agent), "timezone": AGENT_MESSAGE});
            pass.expect_json(
                "agent, bad device id and zone",
                POST_AGENT,
                &bad,
                400,
                false,
            )
            .await;
            pass.expect_wrong_key("agent, wrong key", POST_AGENT, &round1)
                .await;
            pass.app.openai.set_default(Behaviour::schema_valid());
            agent_device_secret(pass).await;
        }
        "put-device" => {
            let body = json!({"deviceId": d.registered, "voipToken": voip_token(), "environment": "sandbox"});
            pass.expect_json("PUT /devices", PUT_DEVICES, &body, 200, true)
                .await;
            let bad =
                json!({"deviceId": d.registered, "voipToken": format!("{}{CALLER}", voip_token())});
            pass.expect_json("PUT /devices, bad token", PUT_DEVICES, &bad, 400, false)
                .await;
            pass.expect_wrong_key("PUT /devices, wrong key", PUT_DEVICES, &body)
                .await;
            // The device secret: issued, proven, then refused with another value or none.
            pass.device_secret().await;
            let body = json!({"deviceId": pass.devices.secret, "voipToken": voip_token()});
            for (what, secret) in [("another secret", Some(WRONG_SECRET)), ("no secret", None)] {
                let mut request = pass
                    .agent(http::Method::PUT, "/devices")
                    .body(body.to_string());
                if let Some(secret) = secret {
                    request = request.header("x-device-secret", secret);
                }
                let what = format!("PUT /devices, {what}");
                pass.refused(&what, request, 403, "DEVICE_SECRET_REQUIRED")
                    .await;
            }
        }
        "create-call" => {
            pass.store_device(&d.registered).await;
            let at = (Utc::now() + Duration::hours(1)).to_rfc3339();
            let body = json!({"deviceId": d.registered, "scheduledAt": at, "callerName": CALLER});
            pass.expect_json("POST /calls", POST_CALLS, &body, 201, true)
                .await;
            pass.expect_json("POST /calls, again", POST_CALLS, &body, 409, true)
                .await;
            let unregistered =
                json!({"deviceId": d.unregistered, "scheduledAt": at, "callerName": CALLER});
            pass.expect_json(
                "POST /calls, unregistered",
                POST_CALLS,
                &unregistered,
                409,
                true,
            )
            .await;
            let bad = json!({"deviceId": d.registered, "scheduledAt": format!("{CALLER}"), "callerName": CALLER.repeat(10)});
            pass.expect_json("POST /calls, invalid", POST_CALLS, &bad, 400, false)
                .await;
            calls_idempotency(pass).await;
            calls_device_secret(pass).await;
        }
        "get-call" => {
            let device = pass.store_device(&d.registered).await;
            if !pass.down
                && pass
                    .app
                    .store
                    .get_reservation(&device.device_id, Utc::now())
                    .await
                    .unwrap()
                    .is_none()
            {
                pass.store_reservation(&device, 3_600_000).await;
            }
            let invalid = format!("{}%20{CALLER}", d.registered);
            for (what, device, status, store_backed) in [
                ("GET /calls", &d.registered, 200, true),
                ("GET /calls, none", &d.unregistered, 404, true),
                ("GET /calls, invalid id", &invalid, 400, false),
            ] {
                let path = format!("/calls?deviceId={device}");
                pass.expect_get(what, &path, status, store_backed).await;
            }
        }
        "cancel-call" => {
            let device = pass.store_device(&d.cancelled).await;
            pass.store_reservation(&device, 3_600_000).await;
            let path = format!("/calls?deviceId={}", d.cancelled);
            for (what, status) in [("DELETE /calls", 204), ("DELETE /calls, again", 404)] {
                let request = pass.agent(http::Method::DELETE, &path);
                pass.expect(what, request, status, true).await;
            }
        }
        "dispatch" => {
            // The route: a valid ID token, a forged one with a sentinel claim, junk.
            let valid = oidc::valid_token();
            let forged = oidc::mint(
                &claims_with(json!({"email": CLAIM_EMAIL, "sub": CLAIM_EMAIL})),
                TestKey::One,
                Some(oidc::KID_1),
            );
            for (authorization, status) in [
                (format!("Bearer {valid}"), 202),
                (format!("Bearer {forged}"), 401),
                (format!("Bearer {ID_TOKEN_JUNK}"), 401),
                (format!("Basic {ID_TOKEN_JUNK}"), 401),
            ] {
                pass.expect(
                    "POST /internal/dispatch",
                    pass.app
                        .agent_unauthenticated(http::Method::POST, "/internal/dispatch")
                        .header("authorization", authorization),
                    status,
                    false,
                )
                .await;
            }
            pass.tokens.extend([valid, forged]);
            // A dispatcher run pushing a call through the app's logging push sender.
            let device = pass.store_device(&d.dispatched).await;
            pass.store_reservation(&device, 1200).await;
            let mut settings = Config::from_vars(&Vars::from_pairs(&[])).unwrap().dispatch;
            settings.window = StdDuration::from_secs(3);
            settings.reselect_every = StdDuration::from_millis(500);
            let dispatcher = Dispatcher::new(
                pass.app.store.clone(),
                pass.app.push.clone(),
                pass.app.clock.clone(),
                settings,
                SALT,
            );
            let report = dispatcher.run(RunCause::Local).await;
            if pass.down {
                assert!(report.store_errors > 0, "{report:?}");
            } else {
                assert_eq!(report.sent, 1, "{} pass: {report:?}", pass.name);
            }
        }
        "confirm-call" => calls_confirm(pass).await,
        other => panic!("log_audit: no scenario for the `{other}` route; add one to `exercise`"),
    }
}

/// `POST /agent` with `AGENT_REQUIRE_DEVICE_SECRET` on (the pass's second app): refused for an
/// unregistered device, with another secret and with none; answered with the proven secret.
/// With the switch off, the header is ignored.
async fn agent_device_secret(pass: &mut Pass) {
    let secret = pass.device_secret().await;
    let round1 = |device: &str| {
        json!({"message": AGENT_MESSAGE, "capabilities": ["calendar"], "deviceId": device})
            .to_string()
    };
    let switched = |secret: Option<&str>, device: &str| {
        let request = pass
            .switched
            .agent_with_key(http::Method::POST, "/agent", AGENT_KEY)
            .body(round1(device));
        match secret {
            Some(secret) => request.header("x-device-secret", secret),
            None => request,
        }
    };
    pass.switched.openai.set_default(Behaviour::schema_valid());
    let (proven, unregistered) = (&pass.devices.secret, &pass.devices.unregistered);
    for (what, request) in [
        ("unregistered", switched(Some(WRONG_SECRET), unregistered)),
        ("another secret", switched(Some(WRONG_SECRET), proven)),
        ("no secret", switched(None, proven)),
    ] {
        let what = format!("agent round 1, secret required, {what}");
        pass.refused(&what, request, 403, "DEVICE_SECRET_REQUIRED")
            .await;
    }
    pass.expect(
        "agent round 1, secret required and sent",
        switched(Some(&secret), proven),
        200,
        true,
    )
    .await;
    pass.expect(
        "agent round 1, a secret sent while not required",
        pass.agent(http::Method::POST, "/agent")
            .header("x-device-secret", &secret)
            .body(round1(proven)),
        200,
        false,
    )
    .await;
}

/// `POST /calls` with an `Idempotency-Key`: the first 201, its replay, the key with another body
/// (409 `IDEMPOTENCY_KEY_REUSED`), then, the reservation cancelled, its replay (409
/// `RESERVATION_GONE`).
async fn calls_idempotency(pass: &mut Pass) {
    let device = pass.devices.idempotent.clone();
    pass.store_device(&device).await;
    let at = (Utc::now() + Duration::hours(1)).to_rfc3339();
    let body = json!({"deviceId": device, "scheduledAt": at, "callerName": CALLER});
    let mut other = body.clone();
    other["callerName"] = json!(format!("{CALLER} 2"));
    let keyed = |body: &Value| {
        pass.agent(http::Method::POST, "/calls")
            .header("idempotency-key", IDEMPOTENCY_KEY)
            .body(body.to_string())
    };
    pass.expect("POST /calls, keyed", keyed(&body), 201, true)
        .await;
    pass.expect("POST /calls, keyed, replayed", keyed(&body), 201, true)
        .await;
    pass.refused(
        "POST /calls, key reused with another body",
        keyed(&other),
        409,
        "IDEMPOTENCY_KEY_REUSED",
    )
    .await;
    pass.expect(
        "DELETE /calls, the keyed reservation",
        pass.agent(http::Method::DELETE, &format!("/calls?deviceId={device}")),
        204,
        true,
    )
    .await;
    pass.refused(
        "POST /calls, keyed, reservation gone",
        keyed(&body),
        409,
        "RESERVATION_GONE",
    )
    .await;
}

/// `/calls` for the device whose secret is proven: with it, with another, without.
async fn calls_device_secret(pass: &mut Pass) {
    let secret = pass.device_secret().await;
    let device = pass.devices.secret.clone();
    let at = (Utc::now() + Duration::hours(1)).to_rfc3339();
    let body = json!({"deviceId": device, "scheduledAt": at, "callerName": CALLER});
    pass.expect(
        "POST /calls, with the device secret",
        pass.agent(http::Method::POST, "/calls")
            .header("x-device-secret", &secret)
            .body(body.to_string()),
        201,
        true,
    )
    .await;
    let path = format!("/calls?deviceId={device}");
    pass.expect(
        "GET /calls, with the device secret",
        pass.agent(http::Method::GET, &path)
            .header("x-device-secret", &secret),
        200,
        true,
    )
    .await;
    pass.refused(
        "GET /calls, another secret",
        pass.agent(http::Method::GET, &path)
            .header("x-device-secret", WRONG_SECRET),
        403,
        "DEVICE_SECRET_REQUIRED",
    )
    .await;
    pass.refused(
        "DELETE /calls, no secret",
        pass.agent(http::Method::DELETE, &path),
        403,
        "DEVICE_SECRET_REQUIRED",
    )
    .await;
}

/// `POST /calls/confirm` for the device whose secret is proven, once a push of its call left
/// (made through the store, as the dispatcher makes it): with the secret (200), again (200),
/// with another secret (403); a call the device does not hold (404); a malformed `callId`
/// carrying a sentinel (400).
async fn calls_confirm(pass: &mut Pass) {
    let secret = pass.device_secret().await;
    let device = pass.devices.secret.clone();
    let call_id = if pass.down {
        CallId::generate()
    } else {
        pushed_call(pass, &device).await
    };
    let body = json!({"deviceId": device, "callId": call_id.as_str()}).to_string();
    let confirm = |secret: &str, body: &str| {
        pass.agent(http::Method::POST, "/calls/confirm")
            .header("x-device-secret", secret)
            .body(body.to_owned())
    };
    let what = "POST /calls/confirm, with the device secret";
    pass.expect(what, confirm(&secret, &body), 200, true).await;
    let what = "POST /calls/confirm, again";
    pass.expect(what, confirm(&secret, &body), 200, true).await;
    let what = "POST /calls/confirm, another secret";
    let refused = confirm(WRONG_SECRET, &body);
    pass.refused(what, refused, 403, "DEVICE_SECRET_REQUIRED")
        .await;
    let other = json!({"deviceId": pass.devices.registered, "callId": CallId::generate().as_str()});
    let request = pass
        .agent(http::Method::POST, "/calls/confirm")
        .body(other.to_string());
    pass.refused(
        "POST /calls/confirm, no such call",
        request,
        404,
        "NOT_FOUND",
    )
    .await;
    let bad = json!({"deviceId": device, "callId": CALLER}).to_string();
    let what = "POST /calls/confirm, invalid";
    pass.expect(what, confirm(&secret, &bad), 400, false).await;
}

/// The device's scheduled call (made if it has none), claimed, marked and recorded pushed to a
/// device that confirms its calls, as a dispatch run does.
async fn pushed_call(pass: &Pass, device: &str) -> CallId {
    let store = &pass.app.store;
    let id = DeviceId::parse("deviceId", device).unwrap();
    let now = Utc::now();
    let reservation = match store.get_reservation(&id, now).await.unwrap() {
        Some(r) if r.status == ReservationStatus::Scheduled => r,
        _ => {
            let jst = FixedOffset::east_opt(9 * 3600).unwrap();
            let at = ScheduledAt::from_stored((now + Duration::hours(1)).with_timezone(&jst));
            let r = Reservation::new(id.clone(), at, Some(CALLER.into()), now);
            store
                .create_reservation(&r, now, now - Duration::seconds(150))
                .await
                .unwrap();
            r
        }
    };
    let (call, run, before) = (
        &reservation.call_id,
        RunToken::generate(),
        now - Duration::seconds(30),
    );
    assert!(
        store
            .claim_reservation(&id, call, &run, now, before)
            .await
            .unwrap()
    );
    assert!(
        store
            .mark_push_started(&id, call, &run, now, true)
            .await
            .unwrap()
    );
    // Its first push.
    let pushed = Outcome::Pushed {
        next_at: now + Duration::seconds(5),
        pushes: 1,
    };
    let recorded = store.finish_reservation(&id, call, pushed, &run, now, before);
    assert!(recorded.await.unwrap(), "{} pass: pushed", pass.name);
    reservation.call_id.clone()
}

fn assert_no_sentinel(capture: &LogCapture, tokens: &[String]) {
    let mut forbidden = forbidden();
    for token in tokens {
        forbidden.push(token.clone());
        for part in token.split('.') {
            forbidden.push(part.to_owned()); // header, claims, signature: each on its own
        }
    }
    capture.assert_none_of(&forbidden);
}

/// The access-log lines (`message: request`) captured from `offset` on, as (method, route).
fn routes_logged(capture: &LogCapture, offset: usize) -> Vec<(String, String)> {
    capture.lines()[offset..]
        .iter()
        .filter(|l| l["message"] == "request")
        .map(|l| {
            (
                l["method"].as_str().unwrap_or_default().to_owned(),
                l["route"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_on_every_store_logs_no_personal_data() {
    let capture = logs::capture();
    tracing::info!(probe = "log-audit-probe", "capture check");

    // A DynamoDB that is down: a closed port. Without retries, so that every call fails at
    // once (what is audited here is what the failures log, not how long they take).
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let down: Arc<dyn Store> = Arc::new(DynamoStore::new(
        aws_sdk_dynamodb::Client::from_conf(
            dynamodb::config_builder(&closed)
                .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
                .build(),
        ),
        koe::store::TableNames {
            devices: "devices".into(),
            calls: "scheduledCalls".into(),
            usage: "agentUsage".into(),
        },
    ));
    let dynamo: Arc<dyn Store> = Arc::new(dynamodb::fresh_store().await);
    let passes = [
        ("memory", None, false),
        ("dynamodb", Some(dynamo), false),
        ("dynamodb-down", Some(down), true),
    ];

    let mut tokens = Vec::new();
    for (name, store, is_down) in passes {
        let mut pass = Pass::start(name, store, is_down).await;
        let offset = capture.lines().len();
        for route in ROUTES {
            exercise(&mut pass, route.binary).await;
        }
        // Every route of the table left its access-log line in this pass.
        let logged = routes_logged(&capture, offset);
        for route in ROUTES {
            assert!(
                logged
                    .iter()
                    .any(|(m, r)| *m == route.method.as_str() && r == route.path),
                "{name} pass: {} {} was not exercised (no access-log line)",
                route.method,
                route.path
            );
        }
        // Devices appear as their salted hash (positive control), never in clear.
        let contents = capture.contents();
        let hash = DeviceId::parse("deviceId", &pass.devices.dispatched)
            .unwrap()
            .log_hash(SALT);
        if !is_down {
            assert!(
                contents.contains(&hash),
                "{name} pass: the pushed device's hash is logged"
            );
        }
        for id in pass.devices.all() {
            assert!(!contents.contains(id), "{name} pass: {id} in clear");
        }
        tokens.append(&mut pass.tokens);
    }

    let lines = capture.lines();
    assert!(
        lines.iter().any(|l| l["probe"] == "log-audit-probe"),
        "the capture works (positive control)"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["message"] == "voip push (logged, not sent)"),
        "the logging push sender's line was captured (positive control)"
    );
    assert!(
        lines.iter().any(|l| l["code"] == "SERVICE_UNAVAILABLE"),
        "the outage pass was logged (positive control)"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["error"].as_str().is_some_and(|e| e.contains("DynamoDB"))),
        "the DynamoDB SDK's errors were logged, and so audited (positive control)"
    );
    for code in [
        "DEVICE_SECRET_REQUIRED",
        "IDEMPOTENCY_KEY_REUSED",
        "RESERVATION_GONE",
    ] {
        assert!(
            lines.iter().any(|l| l["code"] == code),
            "{code} was answered, and so audited (positive control)"
        );
    }
    for message in [
        "reservation answer replayed for a repeated Idempotency-Key",
        "agent round 1 refused: the device's proven secret was not presented",
    ] {
        assert!(
            lines.iter().any(|l| l["message"] == message),
            "\"{message}\" was logged, and so audited (positive control)"
        );
    }
    assert_every_request_line_has_its_id(&lines);
    assert_no_sentinel(&capture, &tokens);
}

/// Every line logged while a request was answered carries the request's id (`span.request_id`,
/// the same id as its access-log line and its `x-request-id` header), and handler lines really
/// are among them (the SDK's errors, logged when the outage pass answered 503).
fn assert_every_request_line_has_its_id(lines: &[Value]) {
    let answered: std::collections::HashSet<&str> = lines
        .iter()
        .filter(|l| l["message"] == "request")
        .filter_map(|l| l["request_id"].as_str())
        .collect();
    assert!(!answered.is_empty(), "access-log lines carry request_id");
    let in_requests: Vec<&Value> = lines
        .iter()
        .filter(|l| l["span"]["name"] == "request")
        .collect();
    for line in &in_requests {
        let id = line["span"]["request_id"].as_str().unwrap_or_default();
        assert!(
            answered.contains(id),
            "a line logged inside a request names a request that was answered: {line}"
        );
    }
    assert!(
        in_requests.iter().any(|l| l["message"] != "request"
            && l["error"].as_str().is_some_and(|e| e.contains("DynamoDB"))),
        "the store's error lines, logged while answering, carry the request id"
    );
    for line in lines.iter().filter(|l| l["message"] == "request") {
        assert_eq!(
            line["span"]["request_id"], line["request_id"],
            "the access-log line is inside its request's span: {line}"
        );
    }
}
