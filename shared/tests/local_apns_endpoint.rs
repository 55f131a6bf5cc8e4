//! koe-local with `APNS_ENDPOINT` and the four `APNS_*` values: each due call's VoIP push goes
//! to that loopback HTTP/2 server (here the strict stand-in APNs) as it would go to Apple (topic
//! `<bundle>.voip`, push type `voip`, the provider token as bearer), and nothing personal
//! reaches the logs (a trace-level capture of everything the process logs is scanned). An
//! endpoint off this machine is refused at start-up, naming the variable.
//!
//! Its own test binary, so the capture sees only this binary's runs.

use std::time::Duration as StdDuration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{Duration, FixedOffset, Utc};
use koe::App;
use koe::platform::config::Vars;
use koe_testkit::harness::spawn_app;
use koe_testkit::logs;
use koe_testkit::push::strict::{Fate, StrictApns, StrictSettings};
use serde_json::json;

const TEST_P8: &str = include_str!("../../testkit/keys/apns-test.p8");
const DEVICE: &str = "SENTINEL-DEVICE-e9a1";
const CALLER: &str = "SENTINEL-CALLER-4b7c";
/// The device's VoIP token: hexadecimal, with a part a leak would show.
const TOKEN_PART: &str = "c0ffee15";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn koe_local_sends_each_due_calls_push_to_the_apns_endpoint_and_logs_nothing_personal() {
    let capture = logs::capture();
    let apns = StrictApns::start(StrictSettings::default()).await;
    let endpoint = format!("http://{}", apns.addr);
    let app = spawn_app(&[
        ("LOCAL_DISPATCHER", "true"),
        ("APNS_ENDPOINT", &endpoint),
        ("APNS_KEY_P8", TEST_P8),
        ("APNS_KEY_ID", "ABCDE12345"),
        ("APNS_TEAM_ID", "TEAM123456"),
        ("APNS_BUNDLE_ID", "com.example.koe"),
    ])
    .await;
    let token = TOKEN_PART.repeat(8);
    let put = json!({"deviceId": DEVICE, "voipToken": token});
    let put = app
        .agent(http::Method::PUT, "/devices")
        .body(put.to_string());
    let put: serde_json::Value = put.send().await.unwrap().json().await.unwrap();
    let secret = put["deviceSecret"]
        .as_str()
        .expect("a device secret")
        .to_owned();
    let at = (Utc::now() + Duration::milliseconds(10_700))
        .with_timezone(&FixedOffset::east_opt(9 * 3600).unwrap())
        .to_rfc3339();
    let call = json!({"deviceId": DEVICE, "scheduledAt": at, "callerName": CALLER});
    let created = app
        .agent(http::Method::POST, "/calls")
        .header("x-device-secret", &secret)
        .body(call.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 201);
    let created: serde_json::Value = created.json().await.unwrap();
    let call_id = created["callId"].as_str().unwrap().to_owned();

    let deadline = std::time::Instant::now() + StdDuration::from_secs(30);
    while apns.processed(&call_id) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no push reached APNS_ENDPOINT: {:?}\n{}",
            apns.seen(),
            capture.summary()
        );
        tokio::time::sleep(StdDuration::from_millis(20)).await;
    }
    let seen = apns.seen();
    assert_eq!(seen.len(), 1, "one push, once: {seen:?}");
    let push = &seen[0];
    assert_eq!(push.fate, Fate::Accepted);
    assert_eq!(push.head.device_token, token);
    assert_eq!(push.head.topic, "com.example.koe.voip");
    assert_eq!(push.head.push_type, "voip");
    let jwt = push
        .head
        .authorization
        .strip_prefix("bearer ")
        .expect("a bearer token")
        .to_owned();
    let part = |n: usize| -> serde_json::Value {
        let bytes = URL_SAFE_NO_PAD
            .decode(jwt.split('.').nth(n).unwrap())
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    };
    assert_eq!(part(0), json!({"alg": "ES256", "kid": "ABCDE12345"}));
    assert_eq!(part(1)["iss"], "TEAM123456");

    // The push's outcome is recorded before the logs are read.
    while !capture.contents().contains(&call_id) {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            capture.summary()
        );
        tokio::time::sleep(StdDuration::from_millis(20)).await;
    }
    let signature = jwt.rsplit('.').next().unwrap().to_owned();
    capture.assert_none_of([
        DEVICE.to_owned(),
        "DEVICE-e9a1".into(),
        CALLER.into(),
        "CALLER-4b7c".into(),
        TOKEN_PART.into(),
        TOKEN_PART.to_uppercase(),
        secret,
        jwt,
        signature,
    ]);
}

#[test]
fn an_apns_endpoint_off_this_machine_is_refused_at_start_up() {
    for endpoint in ["http://192.0.2.7:8443", "https://api.push.apple.com"] {
        let vars = Vars::from_pairs(&[("APNS_ENDPOINT", endpoint)]);
        let err = App::local(vars).check_config().unwrap_err();
        assert_eq!(err.var, "APNS_ENDPOINT", "{endpoint}");
    }
}

/// Issue 58: `APNS_ENDPOINT` without the key values would only log pushes, saying nothing: it is
/// refused at start-up, naming the variables missing; with some of them, the first missing one
/// is named.
#[test]
fn an_apns_endpoint_without_the_key_values_is_refused_naming_them() {
    let vars = Vars::from_pairs(&[("APNS_ENDPOINT", "http://127.0.0.1:8443")]);
    let err = App::local(vars).check_config().unwrap_err();
    assert_eq!(err.var, "APNS_ENDPOINT");
    for missing in [
        "APNS_KEY_P8",
        "APNS_KEY_ID",
        "APNS_TEAM_ID",
        "APNS_BUNDLE_ID",
    ] {
        assert!(err.to_string().contains(missing), "{missing}: {err}");
    }
    let vars = Vars::from_pairs(&[
        ("APNS_ENDPOINT", "http://127.0.0.1:8443"),
        ("APNS_KEY_ID", "ABCDE12345"),
    ]);
    let err = App::local(vars).check_config().unwrap_err();
    assert_eq!(err.var, "APNS_KEY_P8", "{err}");
}
