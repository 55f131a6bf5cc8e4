//! The paths carrying a credential or answering from a kept record: device secret, idempotency key.

use chrono::{Duration, FixedOffset, Utc};
use koe::domain::device::DeviceId;
use koe::domain::reservation::{CallId, Reservation, ReservationStatus, RunToken, ScheduledAt};
use koe::store::Outcome;
use koe_testkit::openai::Behaviour;
use serde_json::{Value, json};

use crate::pass::Pass;
use crate::sentinels::*;

/// `POST /agent` with `AGENT_REQUIRE_DEVICE_SECRET` on (the pass's second app): refused for an
/// unregistered device, with another secret and with none; answered with the proven secret.
/// With the switch off, the header is ignored.
pub(super) async fn agent_device_secret(pass: &mut Pass) {
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
pub(super) async fn calls_idempotency(pass: &mut Pass) {
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

/// The device whose secret is proven, and its secret.
async fn proven_device(pass: &mut Pass) -> (String, String) {
    let secret = pass.device_secret().await;
    (pass.devices.secret.clone(), secret)
}

/// `/calls` for the device whose secret is proven: with it, with another, without.
pub(super) async fn calls_device_secret(pass: &mut Pass) {
    let (device, secret) = proven_device(pass).await;
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
pub(super) async fn calls_confirm(pass: &mut Pass) {
    let (device, secret) = proven_device(pass).await;
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
pub(super) async fn pushed_call(pass: &Pass, device: &str) -> CallId {
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
