//! The device records: put, get, the device secret's proof and hold, remove by token.

use std::sync::Arc;

use koe::domain::device::{AlertToken, Device, DeviceId, PushEnvironment, VoipToken};
use koe::store::DeviceWrite::{Refused, Written};
use koe::store::Op;

use super::{DynStore, device, new_device_id, new_token, secs, t0};

/// The device's record as read now.
async fn get(store: &DynStore, id: &DeviceId) -> Option<Device> {
    store
        .get_device(id, chrono::Utc::now())
        .await
        .expect("get_device")
}

/// Whether removing the device with `token` removed a record.
async fn removed(store: &DynStore, id: &DeviceId, token: &VoipToken) -> bool {
    store.remove_device(id, token).await.expect("remove_device")
}

async fn put_device_then_get_returns_the_same_record(store: DynStore) {
    let id = new_device_id();
    let d = device(&id, PushEnvironment::Sandbox, t0());
    store.put_device(&d).await.expect("put_device");
    assert_eq!(get(&store, &id).await, Some(d));

    let other = device(&new_device_id(), PushEnvironment::Production, t0());
    store.put_device(&other).await.expect("put_device");
    assert_eq!(get(&store, &other.device_id).await, Some(other));
}

async fn put_device_again_replaces_token_and_environment(store: DynStore) {
    let id = new_device_id();
    let first = device(&id, PushEnvironment::Sandbox, t0());
    store.put_device(&first).await.expect("put_device");
    let second = device(&id, PushEnvironment::Production, t0() + secs(5));
    assert_ne!(first.voip_token, second.voip_token);
    store.put_device(&second).await.expect("put_device again");
    assert_eq!(get(&store, &id).await, Some(second));
}

/// PUT /devices' write against the device's secret (docs/security.md, "Device-scoped access").
async fn device_proof_tells_the_secrets_state(store: DynStore) {
    use koe::store::DeviceProof::{Registered, Unregistered};
    let id = new_device_id();
    let proof = || {
        let store = store.clone();
        let id = id.clone();
        async move { store.device_proof(&id, chrono::Utc::now()).await.unwrap() }
    };
    assert_eq!(proof().await, Unregistered);
    let d = device(&id, PushEnvironment::Production, t0());
    store.put_device(&d).await.unwrap();
    let before_secrets = Registered {
        secret_hash: None,
        proven: false,
        has_token: true,
    };
    assert_eq!(proof().await, before_secrets);
    assert!(before_secrets.admits(None) && !before_secrets.admits(Some("h1")));
    store.register_device(&d, None, "h1").await.unwrap();
    let issued = Registered {
        secret_hash: Some("h1".into()),
        proven: false,
        has_token: true,
    };
    assert_eq!(proof().await, issued);
    assert!(issued.admits(None) && issued.admits(Some("h1")) && !issued.admits(Some("h2")));
    store.register_device(&d, Some("h1"), "h2").await.unwrap();
    let proven = Registered {
        secret_hash: Some("h1".into()),
        proven: true,
        has_token: true,
    };
    assert_eq!(proof().await, proven);
    assert!(proven.has_token());
    assert!(!proven.admits(None) && proven.admits(Some("h1")) && !proven.admits(Some("h2")));
    // APNs called the token dead: the token goes, the proven secret stays and is still needed.
    assert!(removed(&store, &id, &d.voip_token).await);
    let tokenless = proof().await;
    assert_eq!(
        tokenless,
        Registered {
            secret_hash: Some("h1".into()),
            proven: true,
            has_token: false,
        }
    );
    assert!(!tokenless.has_token());
    assert!(!tokenless.admits(None) && tokenless.admits(Some("h1")));
    assert_eq!(get(&store, &id).await, None, "nothing to push to");
    // A device of before secrets loses its record with its token.
    let legacy = new_device_id();
    let old = device(&legacy, PushEnvironment::Production, t0());
    store.put_device(&old).await.unwrap();
    assert!(removed(&store, &legacy, &old.voip_token).await);
    assert_eq!(
        store
            .device_proof(&legacy, chrono::Utc::now())
            .await
            .unwrap(),
        Unregistered
    );
}

async fn register_device_holds_the_secret_once_it_is_proven(store: DynStore) {
    let id = new_device_id();
    let versions: Vec<Device> = (0..8)
        .map(|n| device(&id, PushEnvironment::Production, t0() + secs(n)))
        .collect();
    let v = |n: usize| versions[n].clone();
    let written = |issued, proven| Written { issued, proven };
    let register = |d: Device, presented: Option<&'static str>, new: &'static str| {
        let store = store.clone();
        async move { store.register_device(&d, presented, new).await.unwrap() }
    };
    // New: written with the new secret's hash, not yet proven.
    assert_eq!(register(v(0), None, "h1").await, written(true, false));
    // Without one while unproven (the app of before secrets, or one that never got it):
    // written with a new secret, which replaces the unproven one.
    assert_eq!(register(v(1), None, "h2").await, written(true, false));
    // A wrong secret (the replaced one too) is refused and changes nothing.
    assert_eq!(register(v(2), Some("h1"), "h3").await, Refused);
    assert_eq!(get(&store, &id).await, Some(v(1)));
    // The right one: written, and proven from now on.
    assert_eq!(register(v(3), Some("h2"), "h4").await, written(false, true));
    assert_eq!(get(&store, &id).await, Some(v(3)));
    // Proven: without the secret, or with another, refused; with it, written.
    assert_eq!(register(v(4), None, "h5").await, Refused);
    assert_eq!(register(v(5), Some("h5"), "h6").await, Refused);
    assert_eq!(get(&store, &id).await, Some(v(3)));
    assert_eq!(register(v(6), Some("h2"), "h7").await, written(false, true));
    // The token removed (APNs called it dead): the proven secret still holds the device, so a
    // new token without it is refused (nobody else can take the device over), with it written.
    removed(&store, &id, &v(6).voip_token).await;
    assert_eq!(get(&store, &id).await, None);
    assert_eq!(register(v(7), None, "h8").await, Refused);
    assert_eq!(register(v(7), Some("h8"), "h9").await, Refused);
    assert_eq!(get(&store, &id).await, None);
    assert_eq!(register(v(7), Some("h2"), "h9").await, written(false, true));
    assert_eq!(get(&store, &id).await, Some(v(7)));
    // A record written without a secret (before secrets existed) gets one.
    let legacy = new_device_id();
    let old = device(&legacy, PushEnvironment::Sandbox, t0());
    store.put_device(&old).await.unwrap();
    let newer = device(&legacy, PushEnvironment::Sandbox, t0() + secs(1));
    assert_eq!(
        store.register_device(&newer, None, "g1").await.unwrap(),
        written(true, false)
    );
    assert_eq!(
        store
            .register_device(&newer, Some("g1"), "g2")
            .await
            .unwrap(),
        written(false, true)
    );
}

/// A secret stored but never delivered (the answer that carried it was lost, or the function
/// stopped after the write): the device's next registration without a secret gets a new one
/// that works, until a secret is proven; then nobody takes the device over without it.
async fn an_undelivered_secret_is_replaced_until_one_is_proven(store: DynStore) {
    let id = new_device_id();
    let at = |n| device(&id, PushEnvironment::Production, t0() + secs(n));
    let register = |d: Device, presented: Option<&'static str>, new: &'static str| {
        let store = store.clone();
        async move { store.register_device(&d, presented, new).await.unwrap() }
    };
    let issued = Written {
        issued: true,
        proven: false,
    };
    assert_eq!(register(at(0), None, "u1").await, issued, "never delivered");
    assert_eq!(register(at(1), None, "u2").await, issued, "a usable one");
    assert!(!store.prove_device(&id, "u1", t0() + secs(2)).await.unwrap());
    assert!(store.prove_device(&id, "u2", t0() + secs(2)).await.unwrap());
    assert_eq!(register(at(3), None, "u3").await, Refused, "proven");
    assert_eq!(register(at(4), Some("u1"), "u4").await, Refused);
    let proven = Written {
        issued: false,
        proven: true,
    };
    assert_eq!(register(at(5), Some("u2"), "u5").await, proven);
}

/// A store whose every `register_device` is carried out, its answer lost, and made again (as
/// the SDK makes again a write whose reply did not arrive).
struct LosesRegistrationReplies {
    inner: DynStore,
}

koe_testkit::store_layer!(LosesRegistrationReplies, |_this, op, call| {
    if matches!(op, Op::RegisterDevice(..)) {
        let _lost = call().await;
    }
    call().await
});

/// A registration made again after its reply was lost recognises its own write: it still
/// answers the secret it stored (which then proves the device), and refuses what it refused.
async fn a_registration_made_again_answers_the_secret_it_stored(store: DynStore) {
    let lossy: DynStore = Arc::new(LosesRegistrationReplies {
        inner: store.clone(),
    });
    let id = new_device_id();
    let at = |n| device(&id, PushEnvironment::Production, t0() + secs(n));
    let issued = Written {
        issued: true,
        proven: false,
    };
    let proven = Written {
        issued: false,
        proven: true,
    };
    let first = lossy.register_device(&at(0), None, "r1").await.unwrap();
    assert_eq!(first, issued, "the secret it stored is answered");
    let proof = store.register_device(&at(1), Some("r1"), "r2").await;
    assert_eq!(proof.unwrap(), proven, "and it works");
    let again = lossy.register_device(&at(2), Some("r1"), "r3").await;
    assert_eq!(again.unwrap(), proven);
    assert_eq!(
        lossy.register_device(&at(3), None, "r4").await.unwrap(),
        Refused
    );
    // A new device whose app presents a stale secret: its own new one still answered.
    let other = new_device_id();
    let d = device(&other, PushEnvironment::Sandbox, t0());
    let stale = lossy.register_device(&d, Some("stale"), "s1").await;
    assert_eq!(stale.unwrap(), issued);
    assert!(store.prove_device(&other, "s1", t0()).await.unwrap());
}

async fn get_unknown_device_is_none(store: DynStore) {
    assert_eq!(get(&store, &new_device_id()).await, None);
}

async fn remove_device_with_the_current_token_deletes_it(store: DynStore) {
    let id = new_device_id();
    let d = device(&id, PushEnvironment::Production, t0());
    store.put_device(&d).await.expect("put_device");
    assert!(
        removed(&store, &id, &d.voip_token).await,
        "removed with the current token"
    );
    assert_eq!(get(&store, &id).await, None);
    assert!(
        !removed(&store, &id, &d.voip_token).await,
        "nothing left to remove"
    );
}

async fn remove_device_with_a_stale_token_keeps_it(store: DynStore) {
    let id = new_device_id();
    let old = device(&id, PushEnvironment::Production, t0());
    store.put_device(&old).await.expect("put_device");
    let new = device(&id, PushEnvironment::Production, t0() + secs(1));
    store.put_device(&new).await.expect("put_device again");
    assert!(
        !removed(&store, &id, &old.voip_token).await,
        "a stale token removes nothing"
    );
    assert_eq!(get(&store, &id).await, Some(new));

    let unknown = new_device_id();
    assert!(
        !removed(&store, &unknown, &new_token()).await,
        "an unknown device removes nothing"
    );
    assert_eq!(get(&store, &unknown).await, None);
}

/// The missed-call notice's token: stored with the registration, replaced (or removed) by each
/// registration like every other field, and gone with a VoIP token APNs called dead.
async fn the_alert_token_is_stored_replaced_and_removed_with_the_registration(store: DynStore) {
    let id = new_device_id();
    let alert = AlertToken::parse("alertToken", new_token().expose()).unwrap();
    let mut d = device(&id, PushEnvironment::Sandbox, t0());
    d.alert_token = Some(alert.clone());
    store.register_device(&d, None, "h1").await.unwrap();
    assert_eq!(get(&store, &id).await.unwrap().alert_token, Some(alert));

    let mut again = device(&id, PushEnvironment::Sandbox, t0() + secs(5));
    again.alert_token = None;
    store
        .register_device(&again, Some("h1"), "h2")
        .await
        .unwrap();
    assert_eq!(
        get(&store, &id).await,
        Some(again.clone()),
        "absent: removed"
    );

    let other = AlertToken::parse("alertToken", new_token().expose()).unwrap();
    again.alert_token = Some(other.clone());
    store.put_device(&again).await.unwrap();
    assert_eq!(get(&store, &id).await.unwrap().alert_token, Some(other));
    assert!(removed(&store, &id, &again.voip_token).await);
    assert_eq!(
        get(&store, &id).await,
        None,
        "gone with the dead VoIP token"
    );
}

contract_suite!(
    the_alert_token_is_stored_replaced_and_removed_with_the_registration,
    put_device_then_get_returns_the_same_record,
    put_device_again_replaces_token_and_environment,
    device_proof_tells_the_secrets_state,
    register_device_holds_the_secret_once_it_is_proven,
    an_undelivered_secret_is_replaced_until_one_is_proven,
    a_registration_made_again_answers_the_secret_it_stored,
    get_unknown_device_is_none,
    remove_device_with_the_current_token_deletes_it,
    remove_device_with_a_stale_token_keeps_it,
);
