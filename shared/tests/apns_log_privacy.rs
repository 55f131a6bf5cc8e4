//! No device token, provider token or caller name in the logs of the APNs client
//! (`koe::push::connection`, with h2 under it): pushes go through the client as production wires
//! it, to a stand-in APNs that accepts them and to one that breaks them in each way
//! (`koe_testkit::push`), while a trace-level capture of everything the process logs (our crate
//! and h2 alike) is scanned.
//!
//! Its own test binary, so the capture sees only this binary's runs.

use koe::domain::device::VoipToken;
use koe::push::PushSender;
use koe_testkit::logs;
use koe_testkit::push::broken::{Break, BrokenApns, production_client};
use koe_testkit::push::push_and_device;
use koe_testkit::push::standin::StandInApns;

/// A hexadecimal device token whose parts a leak would show.
const TOKEN_PART: &str = "5e471e1c";
const CALLER: &str = "SENTINEL-CALLER-a9b3";
const DEVICE: &str = "SENTINEL-DEVICE-0d2f";

#[tokio::test]
async fn the_apns_client_logs_no_token_and_no_caller_at_trace() {
    let capture = logs::capture();
    let (mut push, mut device) = push_and_device("c1", DEVICE);
    push.caller_name = Some(CALLER.into());
    device.voip_token = VoipToken::parse("voipToken", &TOKEN_PART.repeat(8)).unwrap();

    let apns = StandInApns::start().await;
    let accepted = production_client(apns.addr).send(&push, &device).await;
    assert_eq!(accepted, Ok(()));
    let bearers = apns.bearers();
    assert_eq!(bearers.len(), 1);
    let jwt = bearers[0].trim_start_matches("bearer ").to_owned();
    let signature = jwt.rsplit('.').next().unwrap().to_owned();

    for how in [
        Break::RefuseStream,
        Break::ResetAfterRead,
        Break::CloseAfterRead,
        Break::CutErrorBody(500),
        Break::CloseBeforeHandshake,
        Break::Answer(410, "Unregistered"),
        Break::NoAnswer,
    ] {
        let server = BrokenApns::start(how).await;
        let failed = production_client(server.addr).send(&push, &device).await;
        assert!(failed.is_err(), "{how:?}");
    }

    assert!(
        capture.contents().contains("APNs connection"),
        "the client's own lines were captured: {}",
        capture.summary()
    );
    capture.assert_none_of([
        TOKEN_PART.to_owned(),
        TOKEN_PART.to_uppercase(),
        CALLER.into(),
        "CALLER-a9b3".into(),
        DEVICE.into(),
        "DEVICE-0d2f".into(),
        jwt,
        signature,
    ]);
}
