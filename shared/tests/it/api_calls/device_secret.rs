//! Device secret (docs/security.md, "Device-scoped access"): /calls holds a proven device to it too.

use koe_testkit::harness::{TestApp, error_body, invalid_field, send, send_with_secret};
use serde_json::{Value, json};

use super::{AT, app_at_now, device_id, encode, token};

async fn calls_with_secret(
    app: &TestApp,
    method: http::Method,
    device: &str,
    secret: Option<&str>,
) -> reqwest::Response {
    send_with_secret(
        if method == http::Method::POST {
            app.agent(method, "/calls").body(
                json!({"deviceId": device, "scheduledAt": AT, "callerName": "Mika"}).to_string(),
            )
        } else {
            app.agent(method, &format!("/calls?deviceId={}", encode(device)))
        },
        secret,
    )
    .await
}

#[tokio::test]
async fn once_the_device_secret_is_proven_calls_need_it_and_before_they_do_not() {
    let (app, _clock) = app_at_now().await;
    let device = "calls-secret-device";
    let secret = app.register_device(device, &token()).await;
    let other = format!("{}0", &secret[1..]);

    // Not proven yet (today's app): no header needed, but a wrong one is refused.
    let wrong = calls_with_secret(&app, http::Method::POST, device, Some(&other)).await;
    error_body(wrong, 403, "DEVICE_SECRET_REQUIRED").await;
    let created = calls_with_secret(&app, http::Method::POST, device, None).await;
    assert_eq!(created.status().as_u16(), 201);
    let created: Value = created.json().await.unwrap();
    assert_eq!(
        calls_with_secret(&app, http::Method::GET, device, None)
            .await
            .status()
            .as_u16(),
        200
    );

    // The app proves it on PUT /devices: from now on /calls needs it.
    app.put_device(device, &token(), Some(&secret)).await;
    for method in [http::Method::GET, http::Method::DELETE, http::Method::POST] {
        for presented in [None, Some(other.as_str())] {
            let refused = calls_with_secret(&app, method.clone(), device, presented).await;
            error_body(refused, 403, "DEVICE_SECRET_REQUIRED").await;
        }
    }
    // Nothing was cancelled or replaced by the refused requests.
    let kept = get_ok_with(&app, device, &secret).await;
    assert_eq!(kept["status"], "scheduled");
    assert_eq!(kept["callId"], created["callId"]);

    let cancelled = calls_with_secret(&app, http::Method::DELETE, device, Some(&secret)).await;
    assert_eq!(cancelled.status().as_u16(), 204);
    let again = calls_with_secret(&app, http::Method::POST, device, Some(&secret)).await;
    assert_eq!(again.status().as_u16(), 201);

    // A malformed header names itself.
    let bad = calls_with_secret(&app, http::Method::GET, device, Some(&"a".repeat(129))).await;
    invalid_field(bad, "X-Device-Secret").await;
}

/// APNs called the token dead (the dispatcher removes it): the device keeps its proven secret,
/// so nobody can register a new token for it, nor read or cancel its reservation, without it.
#[tokio::test]
async fn a_device_whose_token_was_removed_still_needs_its_proven_secret() {
    let (app, _clock) = app_at_now().await;
    let device = "calls-secret-dead-token";
    let secret = app.register_proven_device(device, &token()).await;
    let stored = app.stored_device(device).await.unwrap();
    assert!(
        app.store
            .remove_device(&device_id(device), &stored.voip_token)
            .await
            .unwrap()
    );

    let takeover = json!({"deviceId": device, "voipToken": format!("ef{}", "01234567".repeat(8))});
    let refused = send(
        app.agent(http::Method::PUT, "/devices")
            .body(takeover.to_string()),
    )
    .await;
    error_body(refused, 403, "DEVICE_SECRET_REQUIRED").await;
    for method in [http::Method::GET, http::Method::DELETE, http::Method::POST] {
        let refused = calls_with_secret(&app, method, device, None).await;
        error_body(refused, 403, "DEVICE_SECRET_REQUIRED").await;
    }
    // With the secret: no token to call, so no reservation; a new token restores it.
    let unregistered = calls_with_secret(&app, http::Method::POST, device, Some(&secret)).await;
    error_body(unregistered, 409, "DEVICE_NOT_REGISTERED").await;
    let again = send(
        app.agent(http::Method::PUT, "/devices")
            .header("x-device-secret", &secret)
            .body(takeover.to_string()),
    )
    .await;
    assert_eq!(again.status().as_u16(), 200);
    let created = calls_with_secret(&app, http::Method::POST, device, Some(&secret)).await;
    assert_eq!(created.status().as_u16(), 201);
}

async fn get_ok_with(app: &TestApp, device: &str, secret: &str) -> Value {
    let response = calls_with_secret(app, http::Method::GET, device, Some(secret)).await;
    assert_eq!(response.status().as_u16(), 200);
    response.json().await.unwrap()
}
