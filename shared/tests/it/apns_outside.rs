//! Issue 58's scenario, as an outside engineer ran it: koe-local (the in-process dispatcher,
//! the memory store, the four `APNS_*` values and `APNS_ENDPOINT`) and a strict APNs server
//! that answers every push 150 ms after its stream ends, takes a connection's stream limit down
//! to 1 right after each 410 and back after the next 200, sends one graceful GOAWAY on the 30th
//! push it takes (after which that connection reads nothing more, answers what it took and
//! closes 1.15 s later) and a GOAWAY `ENHANCE_YOUR_CALM` to a client that opens one stream past
//! a limit it acknowledged. 80 devices, every 20th token dead, each with a call due in the same
//! second, created over HTTP 25 s ahead. Every live call reaches the server exactly once and
//! is recorded `sent`; no call is recorded `failed`, `missed` or left claimed that the server
//! never received. On the real clock; nothing about time is asserted (the bench prints it).

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use koe_testkit::harness::{send_with_secret, spawn_app};
use koe_testkit::push::strict::{StrictApns, StrictSettings};

const DEVICES: usize = 80;
const DEAD_EVERY: usize = 20;
const GO_AWAY_AT: u64 = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eighty_calls_in_one_second_reach_a_strict_server_once_each_and_are_recorded_as_it_saw_them()
 {
    let apns = StrictApns::start(StrictSettings::outside()).await;
    apns.go_away_after(GO_AWAY_AT);
    let endpoint = format!("http://{}", apns.addr);
    let key = include_str!("../../../testkit/keys/apns-test.p8");
    let app = spawn_app(&[
        ("LOCAL_DISPATCHER", "true"),
        ("APNS_KEY_P8", key),
        ("APNS_KEY_ID", "ABCDE12345"),
        ("APNS_TEAM_ID", "TEAM123456"),
        ("APNS_BUNDLE_ID", "com.example.koe"),
        ("APNS_ENDPOINT", &endpoint),
    ])
    .await;

    let second = DateTime::from_timestamp(Utc::now().timestamp() + 26, 0).unwrap();
    let at = second.to_rfc3339_opts(SecondsFormat::Secs, true);
    let mut calls = Vec::new();
    for i in 0..DEVICES {
        let (device, token) = (format!("outside-{i}"), format!("{i:064x}"));
        let dead = i % DEAD_EVERY == DEAD_EVERY - 1;
        if dead {
            apns.unregister(&token);
        }
        let secret = app.register_device(&device, &token).await;
        let body = serde_json::json!({"deviceId": device, "scheduledAt": at});
        let request = app
            .agent(http::Method::POST, "/calls")
            .body(body.to_string());
        let created = send_with_secret(request, Some(&secret)).await;
        assert_eq!(created.status().as_u16(), 201, "POST /calls for {device}");
        let created: serde_json::Value = created.json().await.unwrap();
        let call_id = created["callId"].as_str().unwrap().to_owned();
        calls.push((device, secret, call_id, dead));
    }

    // Until every call has ended, at most 25 s past its second (the look).
    let look_until = second + chrono::Duration::seconds(25);
    let mut outcomes = Vec::new();
    loop {
        outcomes.clear();
        for (device, secret, call_id, dead) in &calls {
            let url = format!("/calls?deviceId={device}");
            let request = app.agent(http::Method::GET, &url);
            let got: serde_json::Value = send_with_secret(request, Some(secret))
                .await
                .json()
                .await
                .unwrap();
            let status = got["status"].as_str().unwrap_or("gone").to_owned();
            outcomes.push((device.clone(), call_id.clone(), *dead, status));
        }
        let ended = outcomes
            .iter()
            .all(|(.., status)| !matches!(status.as_str(), "scheduled" | "claimed"));
        if ended || Utc::now() > look_until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let mut wrong = Vec::new();
    for (device, call_id, dead, status) in &outcomes {
        let received = apns.processed(call_id);
        // Received once, and recorded as the server answered; a call never received, or
        // received twice, is wrong whatever was recorded.
        let fine = received == 1 && status == if *dead { "failed" } else { "sent" };
        if !fine {
            wrong.push(format!("{device}: received {received}, recorded {status}"));
        }
    }
    eprintln!(
        "outside scenario: {} wrong of {DEVICES}; {} GOAWAYs, {} refused, {} connections, {} \
         client resets, ended in error {:?}",
        wrong.len(),
        apns.go_aways(),
        apns.refused(),
        apns.connections(),
        apns.client_resets(),
        apns.ended_in_error()
    );
    assert!(apns.go_aways() >= 1, "the GOAWAY came");
    assert_eq!(wrong, Vec::<String>::new());
}
