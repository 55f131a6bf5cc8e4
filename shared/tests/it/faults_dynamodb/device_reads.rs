//! A device read (`get_device`) made by an endpoint gets the SDK's retries; only the dispatcher's
//! store (`DynamoStore::for_dispatcher`, as the app's wiring hands it to the dispatcher) makes it
//! once, since the dispatcher makes an unanswered request again itself. An endpoint reading a
//! device through the store it is given cannot inherit the dispatcher's one attempt.

use chrono::Utc;
use koe::domain::device::PushEnvironment;
use koe::store::prelude::*;

use crate::faults_lost_replies::store_behind_a_dropper;

#[tokio::test]
async fn a_device_read_by_an_endpoint_survives_a_lost_reply_the_dispatchers_is_made_once() {
    let (store, dropper) = store_behind_a_dropper().await;
    let id = koe_testkit::devices::random_id("reads-");
    let device = koe_testkit::devices::device(&id, PushEnvironment::Production, Utc::now());
    store
        .register_device(&device, None, &"ab".repeat(32))
        .await
        .unwrap();
    let gets = || {
        dropper
            .operations()
            .iter()
            .filter(|o| o.as_str() == "GetItem")
            .count()
    };

    dropper.drop_replies("GetItem", &id, 1);
    let before = gets();
    let read = store.get_device(&device.device_id, Utc::now()).await;
    assert_eq!(
        read.unwrap().map(|d| d.device_id),
        Some(device.device_id.clone()),
        "the endpoints' store reads the device after its first reply was lost"
    );
    assert_eq!(dropper.dropped(), 1, "the first reply was lost");
    assert_eq!(gets() - before, 2, "made again by the SDK");

    let dispatcher = store.for_dispatcher();
    dropper.drop_replies("GetItem", &id, 1);
    let before = gets();
    let read = dispatcher.get_device(&device.device_id, Utc::now()).await;
    assert!(read.is_err(), "one attempt, unanswered: {read:?}");
    assert_eq!(dropper.dropped(), 2);
    assert_eq!(gets() - before, 1, "not made again by the SDK");
    // Made again by its caller, as the dispatcher does, it is answered.
    let again = dispatcher.get_device(&device.device_id, Utc::now()).await;
    assert!(matches!(again, Ok(Some(_))), "{again:?}");
}
