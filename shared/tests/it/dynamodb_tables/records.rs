//! Records read back exactly as written; a device's record expires after its last registration.

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use koe::domain::device::{Device, DeviceId, PushEnvironment, VoipToken};
use koe::domain::reservation::{Reservation, ReservationStatus, RunToken, ScheduledAt};
use koe::store::Outcome;
use koe::store::prelude::*;
use koe_testkit::on_call::OnCall;

use super::{at, device_id, store};

#[tokio::test]
async fn records_read_back_exactly_as_written() {
    let (_client, _tables, store) = store().await;
    let now = at("2026-01-01T00:00:00.123Z");

    let id = "6F9619FF-8B86-D011-B42D-00C04FC964FF";
    let device = Device {
        voip_token: VoipToken::parse("voipToken", &"ab".repeat(40)).unwrap(),
        ..koe_testkit::devices::device(id, PushEnvironment::Sandbox, now)
    };
    store.put_device(&device).await.unwrap();
    assert_eq!(
        store
            .get_device(&device.device_id, chrono::Utc::now())
            .await
            .unwrap(),
        Some(device.clone())
    );

    let scheduled_at =
        ScheduledAt::parse("scheduledAt", "2026-01-01T09:30:15.250+09:00", now).unwrap();
    let mut reservation = Reservation::new(
        device.device_id.clone(),
        scheduled_at,
        Some("こえ 🌙 さくら「おはよう」".to_owned()),
        now,
    );
    store
        .create_reservation(&reservation, now, now - Duration::minutes(2))
        .await
        .unwrap();
    let read = store
        .get_reservation(&device.device_id, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read, reservation);
    // DateTime equality ignores the offset: the client's own text must survive too.
    assert_eq!(
        read.scheduled_at
            .with_offset()
            .to_rfc3339_opts(SecondsFormat::AutoSi, true),
        "2026-01-01T09:30:15.250+09:00"
    );

    // Each request at its time, with a claim abandoned a minute before.
    let abandoned = |t: DateTime<Utc>| t - Duration::seconds(60);
    let claimed_at = at("2026-01-01T00:30:15.001Z");
    let run = RunToken::generate();
    let claim = store.claim_for(&reservation, &run, claimed_at, abandoned(claimed_at));
    assert!(claim.await.unwrap());
    reservation.status = ReservationStatus::Claimed;
    reservation.claimed_at = Some(claimed_at);
    reservation.claimed_by = Some(run.clone());
    reservation.updated_at = claimed_at;
    let read = store.get_reservation(&device.device_id, claimed_at).await;
    assert_eq!(read.unwrap(), Some(reservation.clone()));

    let done = claimed_at + Duration::milliseconds(400);
    let finish = store.finish_for(&reservation, Outcome::Sent, &run, done, abandoned(done));
    assert!(finish.await.unwrap());
    reservation.status = ReservationStatus::Sent;
    reservation.pushes = 1;
    reservation.finished_by = Some(run);
    reservation.updated_at = done;
    reservation.expire_at = Some((done + Duration::days(7)).timestamp());
    let read = store.get_reservation(&device.device_id, done).await;
    assert_eq!(read.unwrap(), Some(reservation));
}

/// A device's record expires 400 days after its last registration, renewed by every one, and
/// keeps it (and its secret) when APNs's verdict removes the token.
#[tokio::test]
async fn a_device_expires_400_days_after_its_last_registration() {
    let (client, tables, store) = store().await;
    let expire_at = |id: &DeviceId| {
        let (client, table, id) = (client.clone(), tables.devices.clone(), id.clone());
        async move {
            let item = client
                .get_item()
                .table_name(table)
                .key("deviceId", AttributeValue::S(id.as_str().to_owned()))
                .consistent_read(true)
                .send()
                .await
                .unwrap()
                .item
                .expect("the device's item");
            item["expireAt"].as_n().unwrap().parse::<i64>().unwrap()
        }
    };
    let id = device_id("d-ttl");
    let first = at("2026-01-01T00:00:00Z");
    let device = |updated_at| Device {
        device_id: id.clone(),
        voip_token: VoipToken::parse("voipToken", &"cd".repeat(40)).unwrap(),
        environment: PushEnvironment::Production,
        updated_at,
        confirms_calls: false,
        alert_token: None,
    };
    let later = first + Duration::days(100);
    for (updated_at, hash, what) in [(first, "h1", "first"), (later, "h2", "renewed")] {
        let device = device(updated_at);
        store.register_device(&device, None, hash).await.unwrap();
        assert_eq!(
            expire_at(&id).await,
            (updated_at + Duration::days(400)).timestamp(),
            "{what}"
        );
    }
    assert!(
        store
            .remove_device(&id, &device(later).voip_token)
            .await
            .unwrap()
    );
    assert_eq!(
        expire_at(&id).await,
        (later + Duration::days(400)).timestamp(),
        "kept with the secret"
    );
}
