//! The device records: put, get, the device secret's proof and hold, remove by token.

use koe::domain::device::{Device, DeviceId, PushEnvironment, VoipToken};

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
    use koe::store::DeviceWrite::{Refused, Written};
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
    // The app of before secrets: replaced without one, the unproven secret kept (not reissued).
    assert_eq!(register(v(1), None, "h2").await, written(false, false));
    // A wrong secret is refused and changes nothing.
    assert_eq!(register(v(2), Some("h2"), "h3").await, Refused);
    assert_eq!(get(&store, &id).await, Some(v(1)));
    // The right one: written, and proven from now on.
    assert_eq!(register(v(3), Some("h1"), "h4").await, written(false, true));
    assert_eq!(get(&store, &id).await, Some(v(3)));
    // Proven: without the secret, or with another, refused; with it, written.
    assert_eq!(register(v(4), None, "h5").await, Refused);
    assert_eq!(register(v(5), Some("h5"), "h6").await, Refused);
    assert_eq!(get(&store, &id).await, Some(v(3)));
    assert_eq!(register(v(6), Some("h1"), "h7").await, written(false, true));
    // The token removed (APNs called it dead): the proven secret still holds the device, so a
    // new token without it is refused (nobody else can take the device over), with it written.
    removed(&store, &id, &v(6).voip_token).await;
    assert_eq!(get(&store, &id).await, None);
    assert_eq!(register(v(7), None, "h8").await, Refused);
    assert_eq!(register(v(7), Some("h8"), "h9").await, Refused);
    assert_eq!(get(&store, &id).await, None);
    assert_eq!(register(v(7), Some("h1"), "h9").await, written(false, true));
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

contract_suite!(
    put_device_then_get_returns_the_same_record,
    put_device_again_replaces_token_and_environment,
    device_proof_tells_the_secrets_state,
    register_device_holds_the_secret_once_it_is_proven,
    get_unknown_device_is_none,
    remove_device_with_the_current_token_deletes_it,
    remove_device_with_a_stale_token_keeps_it,
);
