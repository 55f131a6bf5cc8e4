//! Each endpoint called the ways that put personal data in front of it.

use std::time::Duration as StdDuration;

use chrono::{Duration, Utc};
use koe::agent::api::Agent;
use koe::calls::api::{CancelCall, ConfirmCall, CreateCall, GetCall};
use koe::chat::api::Chat;
use koe::devices::api::PutDevice;
use koe::dispatch::api::Dispatch;
use koe::dispatch::{Dispatcher, RunCause};
use koe::domain::agent::tools::{Kind, TOOLS};
use koe::platform::config::{Config, Vars};
use koe::platform::endpoint::{Endpoint, Route};
use koe_testkit::harness::{issued_step_ids_with, tool_results};
use koe_testkit::oidc::{self, TestKey, claims_with};
use koe_testkit::openai::Behaviour;
use serde_json::json;

use crate::from_fixture::from_fixture;
use crate::pass::Pass;
use crate::scenarios::{
    agent_device_secret, calls_confirm, calls_device_secret, calls_idempotency,
};
use crate::sentinels::*;

/// Calls one endpoint the ways that put personal data in front of it: the scenario of its
/// endpoint here, or for a route without one (`GET /health`, a new endpoint) its `events/`
/// fixture (`from_fixture`). The scenarios name their endpoint's type, not a string.
pub(super) async fn exercise(pass: &mut Pass, route: &Route) {
    let d = &pass.devices;
    match route {
        r if *r == Chat::ROUTE => {
            let url = format!("{}/api/chat", pass.app.chat_url);
            let body = json!({"messages": [
                {"role": "system", "content": format!("Be kind. {CHAT_TEXT}")},
                {"role": "user", "content": CHAT_TEXT},
            ]})
            .to_string();
            let post = async |what: &str, body: String, status: u16| {
                let request = pass.app.client.post(&url).body(body);
                pass.expect(what, request, status, false).await
            };
            pass.app.openai.script([Behaviour::complete(CHAT_REPLY)]);
            let reply = post("chat", body.clone(), 200).await;
            assert_eq!(reply["message"]["content"], CHAT_REPLY);
            // A provider error whose body echoes the request and the key.
            pass.app.openai.script([Behaviour::Raw {
                status: 400,
                body: json!({"error": {"message": format!("{UPSTREAM}: {CHAT_TEXT} {OPENAI_KEY}"),
                    "type": "invalid_request_error"}})
                .to_string(),
            }]);
            post("chat, provider 400", body, 500).await;
            // Refusals next to the data.
            for bad in [
                json!({"messages": [{"role": CHAT_TEXT, "content": CHAT_TEXT}]}).to_string(),
                json!({"messages": [{"role": "user", "content": CHAT_TEXT}], "model": CHAT_TEXT})
                    .to_string(),
                format!(r#"{{"messages": [{{"role": "user", "content": "{CHAT_TEXT}" ,,"#),
            ] {
                post("chat, invalid", bad, 400).await;
            }
        }
        r if *r == Agent::ROUTE => {
            // Every tool listed, and each one's results carrying sentinels in its personal fields.
            let tools: Vec<&str> = TOOLS.iter().map(|t| t.name).collect();
            let round1 = json!({"message": AGENT_MESSAGE, "capabilities": tools,
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
            let step_ids = issued_step_ids_with(SALT, &d.agent, TOOLS.len(), pass.app.clock.now());
            let round2 = json!({"message": AGENT_MESSAGE, "deviceId": d.agent,
                "results": tool_results(&step_ids, TITLE, [EVENT_START, EVENT_END])});
            pass.app.openai.script([Behaviour::complete(
                json!({"reply": AGENT_REPLY, "emotion": "happy"}).to_string(),
            )]);
            pass.expect_json("agent round 2", POST_AGENT, &round2, 200, false)
                .await;
            // Each tool's first item refused for a text over its cap, and for a bad date-time.
            for (i, tool) in TOOLS.iter().enumerate() {
                for field in tool.item {
                    let bad_value = match field.kind {
                        Kind::Text(max) => json!(TITLE.repeat(max / TITLE.len() + 1)),
                        Kind::DateTime => json!(format!("{TITLE} {EVENT_START}")),
                        Kind::Bool => continue,
                    };
                    let mut bad = round2.clone();
                    bad["results"][i]["output"][tool.list][0][field.name] = bad_value;
                    let what = format!("agent round 2, {} {} refused", tool.name, field.name);
                    pass.expect_json(&what, POST_AGENT, &bad, 400, false).await;
                }
            }
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
        r if *r == PutDevice::ROUTE => {
            let body = json!({"deviceId": d.registered, "voipToken": voip_token(), "environment": "sandbox", "alertToken": alert_token()});
            pass.expect_json("PUT /devices", PUT_DEVICES, &body, 200, true)
                .await;
            let bad = json!({"deviceId": d.registered, "voipToken": voip_token(), "alertToken": format!("{}{CALLER}", alert_token())});
            pass.expect_json(
                "PUT /devices, bad alert token",
                PUT_DEVICES,
                &bad,
                400,
                false,
            )
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
        r if *r == CreateCall::ROUTE => {
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
        r if *r == GetCall::ROUTE => {
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
        r if *r == CancelCall::ROUTE => {
            let device = pass.store_device(&d.cancelled).await;
            pass.store_reservation(&device, 3_600_000).await;
            let path = format!("/calls?deviceId={}", d.cancelled);
            for (what, status) in [("DELETE /calls", 204), ("DELETE /calls, again", 404)] {
                let request = pass.agent(http::Method::DELETE, &path);
                pass.expect(what, request, status, true).await;
            }
        }
        r if *r == Dispatch::ROUTE => {
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
        r if *r == ConfirmCall::ROUTE => calls_confirm(pass).await,
        _ => from_fixture(pass, route).await,
    }
}
